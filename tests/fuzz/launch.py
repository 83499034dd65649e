"""Starting the audited service (tests.fuzz.audited_server) on a free port.

torch workers are forkserver children that do not inherit the server's audit hook, so
tests.fuzz.audit_hook is added to PT2SERDE_WORKER_IMPORTS: every worker installs it too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.api.conftest import Server
from tests.conftest import ROOT
from tests.fuzz.audit_hook import AUDIT_DIR_ENV

_SERVER_MODULE = "tests.fuzz.audited_server"
_HOOK_MODULE = "tests.fuzz.audit_hook"
_START_TIMEOUT_S = 60.0


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_audited_server(env: dict[str, str], events: Path) -> Server:
    """Start the audited service, recording into `events`; return once /healthz answers."""
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="pt2serde-audited-"))
    imports = [m for m in env.get("PT2SERDE_WORKER_IMPORTS", "").split(",") if m]
    full_env = {
        **os.environ,
        **env,
        "PT2SERDE_WORKER_IMPORTS": ",".join([*imports, _HOOK_MODULE]),
        "PT2SERDE_PORT": str(port),
        "PT2SERDE_DATA_DIR": str(tmp / "data"),
        AUDIT_DIR_ENV: str(events),
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(ROOT),
    }
    with (tmp / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", _SERVER_MODULE],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError((tmp / "server.log").read_text())
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return Server(url, process, tmp)
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    process.wait()
    raise RuntimeError(f"the audited server did not start in {_START_TIMEOUT_S} s")
