"""Crashes at any point of a push leave either no version or a complete one, and nothing behind
after the next cleanup: SIGKILL of a pushing process at each step of storing, and SIGKILL of the
server while a slow client streams the body (timed kills of a server processing a large upload
are in test_processes.py)."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
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


#: what a process killed at each step leaves before cleanup: (staged files, stored objects),
#: given the archive's distinct tensor payloads and large members; the upload stays staged
#: throughout (the route removes it after the push), beside the archive we wrote until it is
#: cut into its skeleton and payloads, and the canonical document and those parts until the
#: push ends
def _left_at(step: str, payloads: int, s3: bool) -> tuple[int, int]:
    parts = payloads + 2  # and the skeleton and the canonical document
    # a local store copies each payload out of the archive and places it in the store as it
    # goes, and removes the archive while the objects are claimed; an object store uploads the
    # payloads from the archive, which stays staged until the push ends
    cut = 1 + (3 if s3 else parts)
    return {
        STAGED: (1, 0),
        "canonical-staged": (3, 0),
        "parts-staged": (cut, 0) if s3 else (cut + 1, payloads),
        "objects-stored": (cut, parts),
        "rows-inserted": (cut, parts),
        "committed": (1, parts),
    }[step]


def _payloads(archive: bytes) -> int:
    """The archive's distinct objects besides its skeleton: members larger than 4 KiB (tensor
    payloads and the document; tinier tensors stay in the skeleton)."""
    with zipfile.ZipFile(io.BytesIO(archive)) as opened:
        return len({opened.read(info) for info in opened.infolist() if info.file_size > 4096})


def test_killed_at_each_step_of_a_push(
    request: pytest.FixtureRequest, backend: Backend, archives: dict[str, bytes], tmp_path: Path
) -> None:
    """One process per step, run side by side, each on storage of its own."""
    archive = tmp_path / "conv.pt2"
    archive.write_bytes(archives["conv"])
    payloads = _payloads(archives["conv"])
    runs: dict[str, tuple[Backend, subprocess.Popen[bytes]]] = {}
    for step in (STAGED, *STEPS):
        where = sibling(request, backend, tmp_path / step)
        command = [sys.executable, "-m", "tests.registry.crash_push", step, str(archive)]
        env = {**os.environ, **where.server_env()}
        process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, env=env)
        runs[step] = (where, process)
    for step, (where, process) in runs.items():
        _, err = process.communicate(timeout=120)
        assert process.returncode == -signal.SIGKILL, (step, process.returncode, err.decode())
        left = stored_files(where)
        counts = (len(left["staged"]), len(left["blobs"]))
        assert counts == _left_at(step, payloads, bool(where.blob_url)), (step, left)
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
            while not stored_files(backend)["staged"]:
                assert time.monotonic() < deadline, "the body never reached the staging area"
                time.sleep(0.02)
            kill_server(server)
    finally:
        stop_registry_server(server)
    assert stored_files(backend)["staged"]
    restarted = start_registry_server(backend)
    try:
        # the restarted server's startup cleanup removed what the dead one was receiving
        assert stored_files(backend) == {"blobs": [], "staged": []}
        with restarted.client() as client:
            assert client.get(f"/v1/models/{MODEL}").json()["code"] == "model-not-found"
    finally:
        stop_registry_server(restarted)
    assert check_consistent(backend) == {}
