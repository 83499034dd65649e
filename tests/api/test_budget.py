"""The API process's memory budget: validating (level semantic, which runs in the API process)
and canonicalizing an upload at the size limit keeps it under its baseline plus 64 MiB.

The upload is a real exported program whose weights are ~130 MiB: tensor bytes must be spooled,
checked and hashed in streams, never held whole. The server's resident set is sampled from
/proc while each request runs; its high-water mark is read before and after as well.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import torch
from torch import nn

from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server
from tests.programs import ZooProgram, archive_bytes

MiB = 1024 * 1024
BUDGET = 64 * MiB
IN_FEATURES, OUT_FEATURES = 4096, 8192
_SAMPLE_EVERY_S = 0.002


class _Wide(nn.Module):
    """A one-layer program whose weight is 128 MiB of float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(IN_FEATURES, OUT_FEATURES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    ep = torch.export.export(_Wide(), (torch.randn(2, IN_FEATURES),))
    path = tmp_path_factory.mktemp("budget") / "wide.pt2"
    torch.export.save(ep, path)
    return path


@pytest.fixture(scope="module")
def zoo_archive_conv(zoo: dict[str, ZooProgram]) -> bytes:
    return archive_bytes(zoo["conv"].ep)


@pytest.fixture(scope="module")
def budget_server(big_archive: Path) -> Iterator[Server]:
    """A server whose upload limit is just over the big archive (a multipart body included)."""
    limit = big_archive.stat().st_size + 64 * 1024
    running = start_server({**SERVER_ENV, "PT2SERDE_MAX_UPLOAD_BYTES": str(limit)})
    try:
        yield running
    finally:
        stop_server(running)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@dataclass
class Usage:
    """Memory of the server process around one request, in bytes."""

    baseline: int
    peak_sampled: int
    hwm_before: int
    hwm_after: int
    samples: int

    @property
    def growth(self) -> int:
        """The request's peak over the baseline: the sampled peak, or the high-water mark if
        the request raised it (the mark catches spikes between two samples)."""
        peak = self.peak_sampled
        if self.hwm_after > self.hwm_before:
            peak = max(peak, self.hwm_after)
        return peak - self.baseline

    def __str__(self) -> str:
        return (
            f"baseline {self.baseline / MiB:.1f} MiB, sampled peak {self.peak_sampled / MiB:.1f} "
            f"MiB ({self.samples} samples), VmHWM {self.hwm_before / MiB:.1f} -> "
            f"{self.hwm_after / MiB:.1f} MiB, growth {self.growth / MiB:.1f} MiB"
        )


def _measured(server: Server, send: Iterator[httpx.Response]) -> tuple[httpx.Response, Usage]:
    pid = server.process.pid
    baseline = _status_kib(pid, "VmRSS") * 1024
    hwm_before = _status_kib(pid, "VmHWM") * 1024
    peak = baseline
    samples = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, samples
        while not done.is_set():
            peak = max(peak, _status_kib(pid, "VmRSS") * 1024)
            samples += 1
            time.sleep(_SAMPLE_EVERY_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        answer = next(send)
    finally:
        done.set()
        sampler.join()
    usage = Usage(baseline, peak, hwm_before, _status_kib(pid, "VmHWM") * 1024, samples)
    return answer, usage


def _validate(client: httpx.Client, archive: Path) -> Iterator[httpx.Response]:
    with archive.open("rb") as body:
        yield client.post(
            "/v1/validate",
            params={"level": "semantic"},
            content=body,
            headers={"Content-Type": "application/zip"},
        )


def _canonicalize(client: httpx.Client, archive: Path) -> Iterator[httpx.Response]:
    with archive.open("rb") as body:
        yield client.post("/v1/canonicalize", files={"file": ("wide.pt2", body, "application/zip")})


@pytest.mark.parametrize("operation", ["validate", "canonicalize"])
def test_an_upload_at_the_limit_stays_within_the_budget(
    operation: str, budget_server: Server, big_archive: Path, zoo_archive_conv: bytes
) -> None:
    send = _validate if operation == "validate" else _canonicalize
    with budget_server.client() as client:
        # the same path once on a small archive: lazy imports and caches are not the upload's
        warm = client.post(
            f"/v1/{operation}",
            params={"level": "semantic"} if operation == "validate" else {},
            content=zoo_archive_conv,
            headers={"Content-Type": "application/zip"},
        )
        assert warm.status_code == 200, warm.text
        answer, usage = _measured(budget_server, send(client, big_archive))
    assert answer.status_code == 200, answer.text[:500]
    if operation == "validate":
        assert answer.json()["valid"] is True
    else:
        assert len(answer.headers["x-weights-digest"]) == 64
    assert usage.samples > 10, str(usage)
    assert usage.growth <= BUDGET, str(usage)
