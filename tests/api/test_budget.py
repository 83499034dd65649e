"""The API process's memory budget: every operation on an upload at the size limit keeps it
under its baseline plus 64 MiB.

The upload is a real exported program whose weights are ~130 MiB: tensor bytes must be spooled,
checked and hashed in streams, never held whole. Validating at level torch and deserializing
hand a worker the upload's path, and the worker reads the tensors (and writes the .pt2 the
route then sends from disk); the safetensors bundle is written to disk tensor by tensor. The
server's resident high-water mark (VmHWM) is reset through /proc/<pid>/clear_refs before each
request and read after it; the resident set (VmRSS) is also sampled while the request runs, in
case the reset is not allowed. Workers are processes of their own: their memory is not the
server's.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest
import torch
from torch import nn

from app.archive import manifest, open_archive
from app.settings import Settings
from app.tensors.safetensors_io import from_safetensors
from tests.api.conftest import SERVER_ENV, Server, start_server, stop_server
from tests.zoo import ZooProgram, archive_bytes

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
    # One HTTP process, so that the process measured is the one that serves the requests.
    env = {**SERVER_ENV, "PT2SERDE_HTTP_WORKERS": "1", "PT2SERDE_MAX_UPLOAD_BYTES": str(limit)}
    running = start_server(env)
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


def _proc_field(pid: int, file: str, field: str) -> int:
    for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/{file}")


def _status_kib(pid: int, field: str) -> int:
    return _proc_field(pid, "status", field)


def _holds_upload(pid: int, folder: Path) -> bool:
    """Whether the process has one of the server's temporary files in `folder` open (its
    write counters cannot tell: a large body goes from the socket to its file by splice)."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith(f"{folder}/pt2serde-"):
            return True
    return False


@dataclass
class Usage:
    """Memory of the server process around one request, in bytes."""

    baseline: int
    peak_sampled: int
    hwm_before: int
    hwm_after: int
    samples: int
    hwm_reset: bool
    #: whether the process held the upload's file open during the request (it spools it).
    held_upload: bool

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
            f"growth {self.growth / MiB:.1f} MiB, held the upload: {self.held_upload}"
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
    held = False
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, samples, held
        while not done.is_set():
            peak = max(peak, _status_kib(pid, "VmRSS") * 1024)
            held = held or _holds_upload(pid, server.tmp)
            samples += 1
            time.sleep(_SAMPLE_EVERY_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        answer = request()
    finally:
        done.set()
        sampler.join()
    usage = Usage(
        baseline,
        peak,
        hwm_before,
        _status_kib(pid, "VmHWM") * 1024,
        samples,
        reset,
        held,
    )
    return answer, usage


#: operation -> path, query, and whether the archive goes as a raw body or a form part.
OPERATIONS: dict[str, tuple[str, dict[str, str], bool]] = {
    "validate-semantic": ("/v1/validate", {"level": "semantic"}, False),
    "canonicalize": ("/v1/canonicalize", {}, True),
    "validate-torch": ("/v1/validate", {"level": "torch"}, False),
    "deserialize": ("/v1/deserialize", {}, True),
    "serialize-safetensors": ("/v1/serialize", {"weights": "safetensors"}, False),
}


def _send(client: httpx.Client, operation: str, archive: bytes | BinaryIO) -> httpx.Response:
    path, params, form = OPERATIONS[operation]
    if form:
        return client.post(path, params=params, files={"file": ("wide.pt2", archive, _ZIP)})
    return client.post(path, params=params, content=archive, headers={"Content-Type": _ZIP})


def _digests(archive: bytes | Path) -> dict[str, str]:
    """sha256 of each tensor's stored bytes, by name."""
    with open_archive(archive, Settings()) as opened:
        return {entry.name: entry.sha256 for entry in manifest(opened)}


def _check_answer(operation: str, answer: httpx.Response, big_archive: Path) -> None:
    if operation.startswith("validate"):
        assert answer.json()["valid"] is True
    elif operation == "canonicalize":
        assert len(answer.headers["x-weights-digest"]) == 64
    elif operation == "deserialize":
        assert answer.headers["content-type"] == _ZIP
        assert _digests(answer.content) == _digests(big_archive)
    else:
        with zipfile.ZipFile(io.BytesIO(answer.content)) as bundle:
            tensors = from_safetensors(bundle.read("weights.safetensors"))
        digests = {name: hashlib.sha256(t.data).hexdigest() for name, t in tensors.items()}
        assert digests == _digests(big_archive)


def _leftovers(server: Server) -> list[str]:
    """Temporary files of the server's that outlive a request (uploads and response bodies)."""
    deadline = time.monotonic() + 5
    while True:
        found = sorted(p.name for p in server.tmp.glob("pt2serde-*"))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_an_upload_at_the_limit_stays_within_the_budget(
    operation: str, budget_server: Server, big_archive: Path, zoo_archive_conv: bytes
) -> None:
    with budget_server.client(timeout=300) as client:
        # the same path once on a small archive: lazy imports, caches and (for the torch jobs)
        # the worker pool are not the upload's
        warm = _send(client, operation, zoo_archive_conv)
        assert warm.status_code == 200, warm.text
        with big_archive.open("rb") as body:
            answer, usage = _measured(budget_server, lambda: _send(client, operation, body))
    assert answer.status_code == 200, answer.text[:500]
    _check_answer(operation, answer, big_archive)
    assert usage.samples > 10, str(usage)
    # the measured process is the one that received (and spooled) the upload
    assert usage.held_upload, str(usage)
    assert usage.growth <= BUDGET, str(usage)
    # the response bodies written to disk go once they are sent, as the uploads do
    assert _leftovers(budget_server) == []
