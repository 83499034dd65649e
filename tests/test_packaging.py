"""The repository stands alone and installs as users expect.

A clone of the committed HEAD, with nothing beside it, runs its tests; `python -m build` makes a
wheel and an sdist of it that ship every file of the packages; the wheel installed into a fresh
venv without torch runs the torch-free commands, and the torch ones say which extra they need.
The venv's base dependencies come from the package index (about a minute on the first run).
"""

from __future__ import annotations

import email.parser
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import orjson
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import schema
from tests.conftest import ROOT
from tests.zoo import build_program, torch_json

#: Modules the base install must not pull in (they belong to the extras).
EXTRA_MODULES = (
    "torch",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "zstandard",
)


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _clean_env() -> dict[str, str]:
    """The environment without anything that would point Python at this checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed HEAD cloned alone into an empty directory."""
    alone = tmp_path_factory.mktemp("alone")
    _ok(_run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), "pt2serde"], alone))
    assert [p.name for p in alone.iterdir()] == ["pt2serde"]
    return alone / "pt2serde"


@pytest.fixture(scope="module")
def tracked(clone: Path) -> list[str]:
    """Every committed file of the `pt2serde`, `schema` and `app` packages."""
    listed = _ok(_run(["git", "ls-files", "pt2serde", "schema", "app"], clone)).split()
    assert "app/cli/__init__.py" in listed
    assert "pt2serde/__init__.py" in listed
    assert "schema/py.typed" in listed
    return listed


@pytest.fixture(scope="module")
def dist(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel `python -m build` makes of the clone (the wheel from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    # No isolation: setuptools is already here, so the build needs no network.
    _ok(_run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), "."], clone))
    [wheel] = out.glob("pt2serde-*.whl")
    [sdist] = out.glob("pt2serde-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def bare_venv(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) with the wheel and its base dependencies only."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], venv.parent))
    _ok(_run([str(venv / "bin" / "pip"), "install", "-q", str(dist["wheel"])], venv.parent))
    return venv


@pytest.fixture(scope="module")
def conv_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch's document of the zoo's conv program, as a file."""
    path = tmp_path_factory.mktemp("docs") / "conv.json"
    path.write_bytes(torch_json(build_program("conv").ep))
    return path


def test_a_clone_with_nothing_beside_it_runs_its_tests(clone: Path) -> None:
    # The suite's Python, but every import from the clone (PYTHONPATH first, as pytest's
    # rootdir would be), so a file read outside the clone would be missing here.
    env = {**_clean_env(), "PYTHONPATH": str(clone)}
    where = _ok(
        _run(
            [
                sys.executable,
                "-c",
                "import app, schema, tests; print(app.__file__, schema.__file__, tests.__file__)",
            ],
            clone,
            env=env,
        )
    ).split()
    assert all(Path(p).is_relative_to(clone) for p in where), where
    tests = ["tests/schema/test_history.py", "tests/schema/test_diff.py"]
    result = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], clone, env=env
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
    assert "error" not in result.stdout.splitlines()[-1]


def test_wheel_and_sdist_ship_every_package_file(dist: dict[str, Path], tracked: list[str]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        in_wheel = set(wheel.namelist())
        [meta_name] = [n for n in in_wheel if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(wheel.read(meta_name).decode())
    assert sorted(set(tracked) - in_wheel) == []
    with tarfile.open(dist["sdist"]) as sdist:
        root = sdist.getnames()[0].split("/")[0]
        in_sdist = {n.removeprefix(f"{root}/") for n in sdist.getnames()}
    assert sorted({*tracked, "README.md", "pyproject.toml"} - in_sdist) == []

    assert meta["Requires-Python"] == ">=3.11"
    requires = meta.get_all("Requires-Dist") or []
    base = [r for r in requires if "extra ==" not in r]
    assert base
    assert not [r for r in base if r.split()[0].startswith(EXTRA_MODULES)], base
    # a range, not a pin: every release whose rules we ship from 2.13 on (pip keeps 2.15)
    torch = [Requirement(r) for r in requires if 'extra == "torch"' in r]
    assert [(r.name, r.specifier) for r in torch] == [("torch", SpecifierSet(">=2.13,<2.16"))]
    assert set(meta.get_all("Provides-Extra") or []) >= {"torch", "server", "all", "dev"}


def test_the_wheel_without_torch_runs_the_torch_free_commands(
    bare_venv: Path, clone: Path, conv_json: Path
) -> None:
    python, cli = str(bare_venv / "bin" / "python"), str(bare_venv / "bin" / "pt2serde")
    env = _clean_env()
    here = conv_json.parent
    probe = _run([python, "-c", "import torch"], here, env=env)
    assert probe.returncode != 0
    assert "No module named 'torch'" in probe.stderr
    loaded = _ok(
        _run(
            [
                python,
                "-c",
                "import sys, app.cli, pt2serde; pt2serde.Client('http://127.0.0.1:9').close(); "
                "print(pt2serde.__version__, *sorted(sys.modules))",
            ],
            here,
            env=env,
        )
    ).split()
    # __version__ is the installed distribution's, as pyproject.toml names it
    assert loaded[0] == tomllib.loads((clone / "pyproject.toml").read_text())["project"]["version"]
    assert [m for m in loaded if m.split(".")[0] in EXTRA_MODULES] == []

    semantic = _run([cli, "validate", "--level", "semantic", "--json", str(conv_json)], here, env)
    report = orjson.loads(_ok(semantic))
    assert report["valid"] is True
    assert report["level"] == "semantic"
    # The same report as the clone's code gives where torch is installed.
    with_torch = _run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "validate",
            "--level",
            "semantic",
            "--json",
            str(conv_json),
        ],
        clone,
        {**env, "PYTHONPATH": str(clone)},
    )
    assert report == orjson.loads(_ok(with_torch))

    changelog = _ok(_run([cli, "schema", "diff", "8.15", "8.20"], here, env))
    assert changelog == schema.changelog(schema.diff("8.15", "8.20"))
    assert "ScalarType.UINT32" in changelog

    for args, extra in (
        (["deserialize", str(conv_json), "-o", str(here / "out.pt2")], "torch"),
        (["validate", str(conv_json)], "torch"),
        (["serve"], "server"),
    ):
        refused = _run([cli, *args], here, env, timeout=60)
        assert refused.returncode == 3, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1
        assert "Traceback" not in refused.stderr
        assert f"pip install 'pt2serde[{extra}]'" in refused.stderr
    assert not (here / "out.pt2").exists()


def test_the_ci_entry_point_is_a_valid_script_that_ends_in_make_test() -> None:
    """CI runs `.ci/run` before anything else: a syntax error there fails CI after 0 s, unseen
    by every other test (it happened once, from an edit that landed inside a comment)."""
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK)
    _ok(_run(["bash", "-n", str(script)], ROOT))
    commands = [
        line.strip()
        for line in script.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert commands[-1] == "make test"
