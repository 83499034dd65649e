"""`import pt2serde`, the name users write (docs/architecture.md, "The import name"): in a fresh
interpreter it gives what it says without importing torch or the server's dependencies, and a
package of ours hidden by a user's (`app/`, a `schema.py`) stops it with one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import orjson

import pt2serde
import schema
from app import client
from tests.conftest import ROOT

#: Modules that `import pt2serde` must not load (torch, and what only the server extra installs).
HEAVY = ("torch", "fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg")


def _python(code: str, cwd: Path, *path: Path) -> subprocess.CompletedProcess[str]:
    """`python -c code` in `cwd` (first on sys.path, as for any -c) with `path` then this
    checkout on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [*path, ROOT]))}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_fresh_interpreter_imports_it_without_torch(tmp_path: Path) -> None:
    probe = f"""
import json, sys
import pt2serde
def loaded(*roots):
    return sorted(m for m in sys.modules if m.split(".")[0] in roots)
first = [loaded(*{HEAVY!r}), loaded("app")]
pt2serde.Client("http://127.0.0.1:9").close()
print(json.dumps([pt2serde.__version__, *first, loaded(*{HEAVY!r})]))
"""
    result = _python(probe, tmp_path)
    assert result.returncode == 0, result.stderr
    version, loaded, ours, heavy_after_client = orjson.loads(result.stdout)
    assert version == metadata.version("pt2serde")
    assert loaded == []
    assert ours == []  # the client is loaded when first asked for
    # the client needs neither torch nor the server extra: a pipeline installs pt2serde alone
    assert heavy_after_client == []


def test_it_re_exports_what_it_says() -> None:
    assert sorted(pt2serde.__all__) == sorted(set(pt2serde.__all__))
    for name in pt2serde.__all__:
        assert getattr(pt2serde, name) is not None, name
    assert pt2serde.schema is schema
    for name in ("ExportedProgram", "load", "dump", "read", "Issue", "SchemaError", "CURRENT"):
        assert getattr(pt2serde, name) is getattr(schema, name), name
    for name in ("Client", "ClientFailure", "NotFound", "Forbidden", "InvalidProgram"):
        assert getattr(pt2serde, name) is getattr(client, name), name
    assert issubclass(pt2serde.NotFound, pt2serde.ClientFailure)


def test_a_users_app_package_first_on_the_path_is_named(tmp_path: Path) -> None:
    """Python has one `app` per process: pt2serde cannot run beside a user's own `app` found
    first, and says so in one line naming both, before anything of ours is imported."""
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("USERS = True\n")
    result = _python("import pt2serde", project)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"ImportError: pt2serde needs its package 'app' ({ROOT / 'app'}), but Python finds "
        f"{project / 'app'} first: a package of that name earlier on sys.path hides it "
        "(rename that one, or put it later on sys.path)"
    )
    # the user's own package still imports as theirs
    assert _python("import app; print(app.USERS)", project).stdout == "True\n"


def test_pypis_schema_module_first_on_the_path_is_named(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "schema.py").write_text("class Schema: ...\n")
    result = _python("import pt2serde", tmp_path, tmp_path / "site")
    assert result.returncode == 1
    assert f"but Python finds {tmp_path / 'site'} first" in result.stderr


def test_the_command_ignores_an_app_in_the_working_directory(tmp_path: Path) -> None:
    """The `pt2serde` console script starts Python with its own directory first on sys.path,
    not the working directory: a user's `app/` there does not hide ours."""
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("raise SystemExit('the user app was imported')\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # what pip writes for `pt2serde = "pt2serde.__main__:main"`
    script = bin_dir / "pt2serde"
    script.write_text(
        "import sys\nfrom pt2serde.__main__ import main\nif __name__ == '__main__':\n"
        "    sys.exit(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(script), "schema", "versions"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "8.20" in result.stdout
