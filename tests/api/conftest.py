"""A real uvicorn server on a free loopback port, started once for the API tests."""

from __future__ import annotations

import os
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(env: dict[str, str]) -> Server:
    """Start `pt2serde serve` on a free port and wait until /healthz answers."""
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="pt2serde-test-"))
    full_env = {
        **os.environ,
        **env,
        "PT2SERDE_PORT": str(port),
        "PT2SERDE_DATA_DIR": str(tmp / "data"),
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(ROOT),
    }
    with (tmp / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
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
            time.sleep(0.2)
    process.kill()
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
