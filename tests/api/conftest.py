"""A real uvicorn server on a free loopback port, started once for the API tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT

#: Small limits so that the limit tests stay small; everything else is the default.
SERVER_ENV = {
    # one HTTP process, so that tests can find its torch workers among its children;
    # test_workers.py runs two
    "PT2SERDE_HTTP_WORKERS": "1",
    "PT2SERDE_WORKERS": "2",
    "PT2SERDE_MAX_UPLOAD_BYTES": str(8 * 1024 * 1024),
    "PT2SERDE_JOB_TIMEOUT_S": "60",
    "PT2SERDE_WORKER_IMPORTS": "tests.bridge.zoo_ops",
}


@dataclass
class Server:
    """A running service: its base URL, process and temporary directory."""

    url: str
    process: subprocess.Popen[bytes]
    tmp: Path

    def client(self, timeout: float = 120.0) -> httpx.Client:
        """An httpx client for this server."""
        return httpx.Client(base_url=self.url, timeout=timeout)


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(env: dict[str, str], command: tuple[str, ...] = ("app.cli", "serve")) -> Server:
    """Start `pt2serde serve` (or `python -m <command>`) on a free port; return once /healthz
    answers.

    `env` may name its own PT2SERDE_DATA_DIR (a registry backend's); by default the data lives
    in the server's temporary directory. The server leads a process group of its own, so that
    a test can kill it together with its torch workers."""
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="pt2serde-test-"))
    full_env = {
        **os.environ,
        "PT2SERDE_DATA_DIR": str(tmp / "data"),
        **env,
        "PT2SERDE_PORT": str(port),
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(ROOT),
    }
    with (tmp / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", *command],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError((tmp / "server.log").read_text())
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return Server(url, process, tmp)
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    raise RuntimeError("the server did not start in 60 s")


def stop_server(server: Server) -> None:
    """Stop the server (SIGTERM, then SIGKILL)."""
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """The service, with two torch workers that register the zoo's custom op."""
    running = start_server(SERVER_ENV)
    try:
        with running.client() as client:
            assert client.get("/readyz").status_code == 200
        yield running
    finally:
        stop_server(running)


def upload_leftovers(server: Server) -> list[str]:
    """Upload temporary files the server left behind."""
    return sorted(p.name for p in server.tmp.glob("pt2serde-upload-*"))
