"""Write every release's rules file (`make releases-rules`), and the reader table of `schema`.

`python -m app.releases.generate [--venvs DIR] [release ...]`. For each release,
`app/bridge/release_dump.py` runs by path in `<venvs>/v<release>/bin/python` (the pinned release
in this interpreter), which writes `data/torch-<release>.json.gz`; a release without a working
venv keeps the file it has. Then `schema/readers.py` is rewritten from all the files. torch-free
itself: torch runs only in the subprocesses.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from app.releases.rules import INSTALLED, release_key

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
    """The interpreter of `release`'s venv (this one for the pinned release), if it runs that
    torch."""
    python = venvs / f"v{release}" / "bin" / "python"
    if release == INSTALLED:
        python = Path(sys.executable)
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
    parser.add_argument("release", nargs="*", default=list(RELEASES))
    args = parser.parse_args(argv)
    DATA.mkdir(parents=True, exist_ok=True)
    for release in args.release:
        python = _venv_python(args.venvs, release)
        if python is None:
            sys.stderr.write(f"torch {release}: no venv at {args.venvs}; its file is kept\n")
            continue
        dump(python, data_file(release))
        sys.stdout.write(f"torch {release}: dumped in {python}\n")
    READERS.write_text(readers_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
