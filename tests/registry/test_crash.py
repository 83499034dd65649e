"""Crashes at any point of a push leave either no version or a complete one, and nothing behind
after the next cleanup: SIGKILL of a pushing process at each step of storing, and SIGKILL of the
server while a slow client streams the body (timed kills of a server processing a large upload
are in test_processes.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.registry.conftest import (
    Backend,
    RegistryServer,
    check_consistent,
    kill_server,
    sibling,
    start_registry_server,
    stop_registry_server,
    stored_files,
)
from tests.registry.crash_push import STAGED, STEPS

MODEL = "crashy"
#: what a process killed at each step leaves before cleanup: (staged files, placed blobs); the
#: upload stays staged throughout (the route removes it after the push), beside the archive we
#: wrote to serve and the canonical document until each is placed
LEFT_AT = {
    STAGED: (1, 0),
    "canonical-staged": (3, 0),
    "archive-placed": (2, 1),
    "both-placed": (1, 2),
    "rows-inserted": (1, 2),
    "committed": (1, 2),
}


def test_killed_at_each_step_of_a_push(
    request: pytest.FixtureRequest, backend: Backend, archives: dict[str, bytes], tmp_path: Path
) -> None:
    """One process per step, run side by side, each on storage of its own."""
    archive = tmp_path / "conv.pt2"
    archive.write_bytes(archives["conv"])
    assert set(LEFT_AT) == {STAGED, *STEPS}
    runs: dict[str, tuple[Backend, subprocess.Popen[bytes]]] = {}
    for step in LEFT_AT:
        where = sibling(request, backend, tmp_path / step)
        command = [sys.executable, "-m", "tests.registry.crash_push", step]
        command += [str(where.data_dir), where.database_url, str(archive)]
        process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE)
        runs[step] = (where, process)
    for step, (where, process) in runs.items():
        _, err = process.communicate(timeout=120)
        assert process.returncode == -signal.SIGKILL, (step, process.returncode, err.decode())
        left = stored_files(where.data_dir)
        assert (len(left["staged"]), len(left["blobs"])) == LEFT_AT[step], (step, left)
        expected = {MODEL: [1]} if step == "committed" else {}
        assert check_consistent(where) == expected, step


def _address(server: RegistryServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def test_killed_while_the_body_streams(backend: Backend, archives: dict[str, bytes]) -> None:
    server = start_registry_server(backend)
    data = archives["conv"]
    head = (
        f"POST /v1/models/{MODEL}/versions HTTP/1.1\r\nHost: registry\r\n"
        f"Content-Type: application/zip\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    try:
        with socket.create_connection(_address(server)) as sock:
            sock.sendall(head + data[: len(data) // 2])
            deadline = time.monotonic() + 10
            while not stored_files(backend.data_dir)["staged"]:
                assert time.monotonic() < deadline, "the body never reached the staging area"
                time.sleep(0.02)
            kill_server(server)
    finally:
        stop_registry_server(server)
    assert stored_files(backend.data_dir)["staged"]
    restarted = start_registry_server(backend)
    try:
        # the restarted server's startup cleanup removed what the dead one was receiving
        assert stored_files(backend.data_dir) == {"blobs": [], "staged": []}
        with restarted.client() as client:
            assert client.get(f"/v1/models/{MODEL}").json()["code"] == "model-not-found"
    finally:
        stop_registry_server(restarted)
    assert check_consistent(backend) == {}
