"""The API process's memory budget: validating (level semantic, which runs in the API process)
and canonicalizing an upload at the size limit keeps it under its baseline plus 64 MiB.

The upload is a real exported program whose weights are ~130 MiB: tensor bytes must be spooled,
checked and hashed in streams, never held whole. The server's resident high-water mark
(VmHWM) is reset through /proc/<pid>/clear_refs before each request and read after it; the
resident set (VmRSS) is also sampled while the request runs, in case the reset is not allowed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
_ZIP = "application/zip"


class _Wide(nn.Module):
    """A one-layer program whose weight is 128 MiB of float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(IN_FEATURES, OUT_FEATURES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """relu(fc(x))."""
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch.export.save of the wide program, on disk (128 MiB)."""
    torch.manual_seed(0)
    ep = torch.export.export(_Wide(), (torch.randn(2, IN_FEATURES),))
    path = tmp_path_factory.mktemp("budget") / "wide.pt2"
    torch.export.save(ep, path)
    return path


@pytest.fixture(scope="module")
def zoo_archive_conv(zoo: dict[str, ZooProgram]) -> bytes:
    """A small real archive, to warm each path up."""
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


def _reset_high_water_mark(pid: int) -> bool:
    """Reset a process's VmHWM to its current VmRSS; False where the kernel does not allow it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


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
    hwm_reset: bool

    @property
    def growth(self) -> int:
        """The request's peak over the baseline: the high-water mark if it was reset before the
        request or raised by it (it catches spikes between two samples), else the sampled peak."""
        peak = self.peak_sampled
        if self.hwm_reset or self.hwm_after > self.hwm_before:
            peak = max(peak, self.hwm_after)
        return peak - self.baseline

    def __str__(self) -> str:
        return (
            f"baseline {self.baseline / MiB:.1f} MiB, sampled peak {self.peak_sampled / MiB:.1f} "
            f"MiB ({self.samples} samples), VmHWM {self.hwm_before / MiB:.1f} -> "
            f"{self.hwm_after / MiB:.1f} MiB (reset: {self.hwm_reset}), "
            f"growth {self.growth / MiB:.1f} MiB"
        )


def _measured(
    server: Server, request: Callable[[], httpx.Response]
) -> tuple[httpx.Response, Usage]:
    pid = server.process.pid
    reset = _reset_high_water_mark(pid)
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
        answer = request()
    finally:
        done.set()
        sampler.join()
    usage = Usage(baseline, peak, hwm_before, _status_kib(pid, "VmHWM") * 1024, samples, reset)
    return answer, usage


#: operation -> path, query, and whether the archive goes as a raw body or a form part.
OPERATIONS: dict[str, tuple[str, dict[str, str], bool]] = {
    "validate-semantic": ("/v1/validate", {"level": "semantic"}, False),
    "canonicalize": ("/v1/canonicalize", {}, True),
    "validate-torch": ("/v1/validate", {"level": "torch"}, False),
}


def _send(client: httpx.Client, operation: str, archive: bytes | BinaryIO) -> httpx.Response:
    path, params, form = OPERATIONS[operation]
    if form:
        return client.post(path, params=params, files={"file": ("wide.pt2", archive, _ZIP)})
    return client.post(path, params=params, content=archive, headers={"Content-Type": _ZIP})


@pytest.mark.parametrize(
    "operation",
    [
        "validate-semantic",
        "canonicalize",
        pytest.param(
            "validate-torch",
            marks=pytest.mark.xfail(
                strict=True,
                reason="measured +257 MiB for 128 MiB of weights: app.operations.validate reads "
                "every tensor whole (Source.raw_tensors -> Archive.raw_tensors -> read_member), "
                "packs them (pack_tensors) and pickles the job (WorkerPool._payload) in the API "
                "process to hand them to the worker",
            ),
        ),
    ],
)
def test_an_upload_at_the_limit_stays_within_the_budget(
    operation: str, budget_server: Server, big_archive: Path, zoo_archive_conv: bytes
) -> None:
    with budget_server.client(timeout=300) as client:
        # the same path once on a small archive: lazy imports, caches and (for level torch) the
        # worker pool are not the upload's
        warm = _send(client, operation, zoo_archive_conv)
        assert warm.status_code == 200, warm.text
        with big_archive.open("rb") as body:
            answer, usage = _measured(budget_server, lambda: _send(client, operation, body))
    assert answer.status_code == 200, answer.text[:500]
    if operation.startswith("validate"):
        assert answer.json()["valid"] is True
    else:
        assert len(answer.headers["x-weights-digest"]) == 64
    assert usage.samples > 10, str(usage)
    assert usage.growth <= BUDGET, str(usage)
