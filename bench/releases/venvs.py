"""One venv per torch release under RELEASES_DIR (`v<release>/bin/python`), made when missing."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# the release the project's own venv pins (the local CPU wheel) serves as that release's venv
from app.releases.rules import INSTALLED as PINNED
from bench.progress import progress

VERSION_TIMEOUT = 180
CREATE_TIMEOUT = 300
# a CUDA wheel and its libraries are several GB
INSTALL_TIMEOUT = 3600


class VenvFailed(RuntimeError):
    """A release's venv could not be made or does not run that release."""


def _reported(python: Path) -> str | None:
    """The torch version `python` imports, or None when it imports none."""
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", "import torch; print(torch.__version__)"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[-1] if done.returncode == 0 and lines else None


def is_release(reported: str | None, release: str) -> bool:
    """Whether a torch version string (`2.14.1+cu130`) is that release."""
    return reported is not None and reported.split("+", 1)[0] == release


def _run(command: list[str], timeout: int, log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        try:
            done = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, env=env, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise VenvFailed(f"{command[0]} timed out after {timeout} s (log: {log})") from exc
        except OSError as exc:
            raise VenvFailed(f"{command[0]}: {exc}") from exc
    if done.returncode != 0:
        raise VenvFailed(f"{' '.join(command[:3])} ... exited {done.returncode} (log: {log})")


def ensure(release: str, releases_dir: Path) -> tuple[Path, str]:
    """The python of `release`'s venv and the torch version it reports, making the venv if needed.

    The pinned release is the project's own interpreter when that has it (no download); the
    others are `pip install torch==<release> numpy` from PyPI, with the machine's pip constraint
    lifted for that one command (the CUDA wheels run on CPU).
    """
    venv = releases_dir / f"v{release}"
    python = venv / "bin" / "python"
    if python.exists():
        reported = _reported(python)
        if is_release(reported, release):
            return python, str(reported)
    elif release == PINNED and is_release(metadata.version("torch"), release):
        return Path(sys.executable), metadata.version("torch")
    releases_dir.mkdir(parents=True, exist_ok=True)
    log = releases_dir / f"v{release}.log"
    if not python.exists():
        progress(f"creating the venv of torch {release} in {venv}")
        _run([sys.executable, "-m", "venv", str(venv)], CREATE_TIMEOUT, log)
    progress(f"installing torch=={release} into {venv} (several GB; log: {log})")
    env = {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
    pip = [str(venv / "bin" / "pip"), "install", "-q", f"torch=={release}", "numpy"]
    _run(pip, INSTALL_TIMEOUT, log, env)
    reported = _reported(python)
    if not is_release(reported, release):
        raise VenvFailed(f"{venv} imports torch {reported}, not {release}")
    return python, str(reported)
