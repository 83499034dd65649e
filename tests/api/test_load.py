"""Concurrency and worker failure through the real server."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from app import operations as ops
from app.settings import Settings
from tests.api.conftest import Server
from tests.zoo import ZooProgram, archive_bytes, torch_json

ZIP = {"Content-Type": "application/zip"}
JSON = {"Content-Type": "application/json"}


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _workers(server: Server) -> list[int]:
    """The server's torch workers: grandchildren (children of its forkserver)."""
    return [w for child in _children(server.process.pid) for w in _children(child)]


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def test_concurrent_clients_mixing_torch_and_pure(
    client: httpx.Client, server: Server, zoo: dict[str, ZooProgram]
) -> None:
    conv = archive_bytes(zoo["conv"].ep)
    dynamic = torch_json(zoo["dynamic"].ep)
    settings = Settings()
    with ops.open_source(conv, "zip", settings) as source:
        conv_digest = ops.canonical(source, settings).digests.program

    def one_client(index: int) -> list[str]:
        wrong = []
        with server.client() as own:
            for i in range(25):
                kind = (index + i) % 4
                if kind == 0:
                    r = own.post("/v1/validate", content=conv, headers=ZIP)
                    ok = r.status_code == 200 and r.json()["valid"] and r.json()["level"] == "torch"
                elif kind == 1:
                    r = own.post(
                        "/v1/validate", params={"level": "semantic"}, content=dynamic, headers=JSON
                    )
                    ok = r.status_code == 200 and r.json()["valid"]
                elif kind == 2:
                    r = own.post("/v1/canonicalize", content=conv, headers=ZIP)
                    ok = r.status_code == 200 and r.headers["x-program-digest"] == conv_digest
                else:
                    r = own.get("/v1/schema")
                    ok = r.status_code == 200 and r.json()["version"] == "8.20"
                if not ok:
                    wrong.append(f"client {index} request {i}: {r.status_code} {r.text[:200]}")
        return wrong

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one_client, range(8)))
    assert [w for ws in results for w in ws] == []


class _Wide(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(400))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _kill_busy_worker(server: Server, deadline_s: float = 60.0) -> int:
    """SIGKILL the first worker seen burning CPU (running a job); its pid."""
    idle = {pid: _cpu_ticks(pid) for pid in _workers(server)}
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for pid, ticks in idle.items():
            if _cpu_ticks(pid) > ticks + 1:
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.01)
    raise AssertionError("no worker started working on the request")


def test_killed_worker_fails_one_request_only(client: httpx.Client, server: Server) -> None:
    torch.manual_seed(0)
    big = archive_bytes(torch.export.export(_Wide(), (torch.randn(2, 16),)))
    outcome: dict[str, httpx.Response] = {}

    def slow_request() -> None:
        outcome["answer"] = client.post("/v1/validate", content=big, headers=ZIP)

    thread = threading.Thread(target=slow_request)
    thread.start()
    killed = _kill_busy_worker(server)
    thread.join(timeout=300)
    answer = outcome["answer"]
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "worker-crashed"
    assert f"pid {killed}" in answer.json()["detail"]
    after = client.post("/v1/validate", content=big, headers=ZIP)
    assert after.status_code == 200, after.text
    assert after.json()["valid"]
    assert killed not in _workers(server)
