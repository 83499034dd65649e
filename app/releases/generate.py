"""Write every release's rules file (`make releases-rules`), and the reader table of `schema`.

`python -m app.releases.generate [--venvs DIR] [--sources DIR] [release ...]`. For each release,
`app/bridge/release_dump.py` runs by path in `<venvs>/v<release>/bin/python` (the pinned release
in this interpreter), which writes `data/torch-<release>.json.gz`. A release without a working
venv gets a file with what its source says, read from `<sources>/<release>/torch/_export/serde/`
(the unpacked wheel): the schema version it writes and whether its `_dict_to_dataclass` builds
dataclasses with `cls(**data)`, which makes any unknown key fatal. Then `schema/readers.py` is
rewritten from all the files. torch-free itself: torch runs only in the subprocesses.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.releases.rules import FORMAT, INSTALLED, release_key

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "app" / "releases" / "data"
DUMP = ROOT / "app" / "bridge" / "release_dump.py"
READERS = ROOT / "schema" / "readers.py"
_CACHE = Path.home() / ".cache" / "pt2serde"
#: Every release that writes schema 8.x that we ship rules for.
RELEASES = (
    "2.6.0",
    "2.7.1",
    "2.8.0",
    "2.9.1",
    "2.10.0",
    "2.11.0",
    "2.12.1",
    "2.13.0",
    "2.14.1",
    "2.15.0",
)


def data_file(release: str) -> Path:
    """Where the rules of `release` live."""
    return DATA / f"torch-{release}.json.gz"


def dump(python: str, out: Path) -> None:
    """Run the dump by path with `python` (a release venv's interpreter) into `out`."""
    subprocess.run(
        [python, str(DUMP), str(out)], check=True, cwd=out.parent, timeout=1800, env=_clean_env()
    )


def _clean_env() -> dict[str, str]:
    # a release venv must not see this project's packages through an inherited PYTHONPATH
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def from_source(release: str, source: Path) -> dict[str, Any]:
    """The rules a release's source states: its schema version and reader policy (no registry)."""
    serde = source / "torch" / "_export" / "serde"
    version = _schema_version((serde / "schema.py").read_text())
    strict = _builds_with_all_keys((serde / "serialize.py").read_text())
    keys = (
        {"policy": "fatal", "error": "read: _dict_to_dataclass builds cls(**data)"}
        if strict
        else {"policy": "skip"}
    )
    fails = {"policy": "fatal", "error": "read: unknown names are looked up and fail"}
    return {
        "format": FORMAT,
        "release": release,
        "torch": release,
        "schema_version": list(version),
        "source": (
            f"read from torch {release}'s torch/_export/serde/schema.py (SCHEMA_VERSION) and "
            "serialize.py (_dict_to_dataclass) by app.releases.generate: no venv ran the dump"
        ),
        "reader": {
            "unknown_key": keys,
            "unknown_node_key": keys,
            "unknown_arm": fails,
            "unknown_enum_value": fails,
        },
        "opset": None,
        "weights_only": None,
    }


def _schema_version(text: str) -> tuple[int, int]:
    for node in ast.parse(text).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "SCHEMA_VERSION" for t in node.targets)
            and isinstance(node.value, ast.Tuple)
        ):
            major, minor = (ast.literal_eval(e) for e in node.value.elts)
            return int(major), int(minor)
    raise RuntimeError("no SCHEMA_VERSION = (major, minor) in schema.py")


def _builds_with_all_keys(text: str) -> bool:
    """Whether `_dict_to_dataclass` calls `cls(**data)`: every key of the dict as an argument."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == "_dict_to_dataclass":
            return any(
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "cls"
                and any(k.arg is None for k in call.keywords)
                for call in ast.walk(node)
            )
    raise RuntimeError("no _dict_to_dataclass in serialize.py")


def write_source_rules(release: str, source: Path) -> None:
    """Write the rules file of a release from its source."""
    text = json.dumps(
        from_source(release, source), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    data_file(release).write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def readers_table() -> str:
    """The text of `schema/readers.py` from the rules files."""
    rows = []
    for path in sorted(DATA.glob("torch-*.json.gz"), key=lambda p: release_key(p.name[6:-8])):
        raw = json.loads(gzip.decompress(path.read_bytes()))
        reader = raw["reader"]
        keys = {reader[p]["policy"] for p in ("unknown_key", "unknown_node_key")}
        policy = "skip" if keys == {"skip"} else "fatal"
        minor = ".".join(raw["release"].split(".")[:2])
        rows.append(f'    "{minor}": "{policy}",\n')
    head = READERS.read_text().split("READERS: ", 1)[0]
    return head + 'READERS: dict[str, Literal["fatal", "skip"]] = {\n' + "".join(rows) + "}\n"


def _venv_python(venvs: Path, release: str) -> str | None:
    if release == INSTALLED:
        return sys.executable
    python = venvs / f"v{release}" / "bin" / "python"
    if not python.exists():
        return None
    probe = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
    )
    found = probe.stdout.strip().split("+")[0]
    return str(python) if probe.returncode == 0 and found == release else None


def main(argv: list[str] | None = None) -> int:
    """Write the rules of the releases named (all by default) and the reader table."""
    parser = argparse.ArgumentParser(prog="python -m app.releases.generate")
    parser.add_argument("--venvs", type=Path, default=_CACHE / "releases")
    parser.add_argument("--sources", type=Path, default=_CACHE / "wheels")
    parser.add_argument("release", nargs="*", default=list(RELEASES))
    args = parser.parse_args(argv)
    DATA.mkdir(parents=True, exist_ok=True)
    for release in args.release:
        python = _venv_python(args.venvs, release)
        if python is not None:
            dump(python, data_file(release))
            how = f"dumped in {python}"
        elif (args.sources / release).is_dir():
            write_source_rules(release, args.sources / release)
            how = f"read from {args.sources / release}"
        else:
            sys.stderr.write(f"torch {release}: no venv and no source; left as it was\n")
            continue
        sys.stdout.write(f"torch {release}: {how}\n")
    READERS.write_text(readers_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
