"""Tensors stored once, archives rebuilt byte for byte (ranges included), and gc racing pushes,
over both blob backends (local directory, SeaweedFS S3) and both databases."""

from __future__ import annotations

import hashlib
import random
import time
from typing import BinaryIO

import pytest
import torch
from torch import nn

from app.registry.objects import layout_of
from app.registry.packing import rebuilt
from app.registry.store import Registry
from tests.registry.conftest import (
    Backend,
    assert_served,
    objects_of,
    prepare,
    pull,
    race_gc,
    rewrite_member,
    stored_files,
    weight_members,
)
from tests.zoo import archive_bytes

VERSIONS = 10


class _Tower(nn.Module):
    """A wide trunk (most of the bytes) and ten small heads, one per fine-tune to change."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(512, 512)
        self.heads = nn.ModuleList(nn.Linear(512, 16) for _ in range(VERSIONS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.trunk(x))
        return torch.stack([head(h) for head in self.heads]).sum(0)


@pytest.fixture(scope="module")
def series() -> list[bytes]:
    """Ten archives of one model, the i-th with head i's weights changed from the base."""
    torch.manual_seed(0)
    ep = torch.export.export(_Tower().eval(), (torch.randn(2, 512),))
    base = archive_bytes(ep)
    names = [f"heads.{i}.weight" for i in range(VERSIONS)]
    members = weight_members(ep)
    out = []
    for i, fqn in enumerate(names):
        noise = torch.randn(16, 512, generator=torch.Generator().manual_seed(i))
        out.append(rewrite_member(base, members[fqn], lambda _, n=noise: n.numpy().tobytes()))
    return out


def test_ten_fine_tunes_store_each_tensor_once(
    registry: Registry, backend: Backend, series: list[bytes]
) -> None:
    pushed = [registry.push("tower", prepare(registry, archive)).version for archive in series]
    assert [v.version for v in pushed] == list(range(1, VERSIONS + 1))
    stored = sum(listed.size for listed in backend.objects().listing())
    one = pushed[0].archive_size
    assert stored <= 1.3 * one, (stored, one)
    for info, upload in zip(pushed, series, strict=True):
        data = pull(registry, "tower", str(info.version))
        assert hashlib.sha256(data).hexdigest() == info.digests.archive
        assert len(data) == info.archive_size
        assert_served(data, upload)
    expected: set[str] = set()
    for info in pushed:
        expected |= objects_of(registry, info.digests.archive, info.digests.graph)
    assert stored_files(backend) == {"blobs": sorted(expected), "staged": []}


def test_ranges_of_a_rebuilt_archive(registry: Registry, series: list[bytes]) -> None:
    info = registry.push("tower", prepare(registry, series[3])).version
    whole = pull(registry, "tower", "1")
    with registry.db.read() as conn:
        layout = layout_of(conn, info.digests.archive)
    assert layout is not None
    # every weight and the document are objects of their own (the biases, 4 KiB or less, are
    # in the skeleton)
    assert len(layout.holes) > VERSIONS + 1
    opened: list[str] = []

    def counting(digest: str) -> object:
        opened.append(digest)
        return registry.blobs.open(digest)

    rng = random.Random(7)
    with rebuilt(layout, counting) as handle:  # type: ignore[arg-type]
        for _ in range(200):
            start = rng.randrange(len(whole))
            end = rng.randrange(start, min(len(whole), start + rng.choice([10, 5000, 1 << 20])) + 1)
            handle.seek(start)
            assert handle.read(end - start) == whole[start:end], (start, end)
    # a read inside the last payload opens the skeleton and that payload only
    opened.clear()
    last = layout.holes[-1]
    with rebuilt(layout, counting) as handle:  # type: ignore[arg-type]
        handle.seek(last.offset + 5)
        assert handle.read(7) == whole[last.offset + 5 : last.offset + 12]
    assert opened == [layout.skeleton, last.digest]


def test_a_rebuilt_archive_read_ahead(registry: Registry, series: list[bytes]) -> None:
    """Opening payloads ahead of the read (as against an object store) changes no byte, in
    order or at random offsets, and closes every object it opened."""
    info = registry.push("tower", prepare(registry, series[5])).version
    whole = pull(registry, "tower", "1")
    with registry.db.read() as conn:
        layout = layout_of(conn, info.digests.archive)
    assert layout is not None
    handles: list[BinaryIO] = []

    def tracking(digest: str) -> BinaryIO:
        handles.append(registry.blobs.open(digest))
        return handles[-1]

    with rebuilt(layout, tracking, ahead=3) as handle:
        assert handle.read() == whole
    rng = random.Random(11)
    with rebuilt(layout, tracking, ahead=3) as handle:
        for _ in range(30):
            start = rng.randrange(len(whole))
            end = min(len(whole), start + rng.choice([10, 5000, 1 << 20]))
            handle.seek(start)
            assert handle.read(end - start) == whole[start:end], (start, end)
    # objects opened ahead and never reached are closed once their open finishes
    deadline = time.monotonic() + 5
    while not all(h.closed for h in handles) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(h.closed for h in handles)


def test_gc_racing_pushes_of_the_same_tensors(backend: Backend, series: list[bytes]) -> None:
    """Pushers store versions sharing the trunk while gc runs over and over with no grace: no
    committed version ever lacks an object."""
    race_gc(backend, {f"m{i}": series[i::2] for i in range(2)})


def test_periodic_gc_collects_an_orphan(backend: Backend) -> None:
    """With gc_interval_s set, a replica collects on its own what no version refers to."""
    orphan = "cd" * 32
    backend.put_raw(f"cd/{orphan}", b"left by a crash")
    registry = Registry(backend.settings(gc_interval_s=0.2))
    try:
        backend.put_raw(f"cd/{orphan}", b"left by another crash")
        deadline = time.monotonic() + 30
        while orphan in stored_files(backend)["blobs"]:
            assert time.monotonic() < deadline, "the periodic gc never ran"
            time.sleep(0.1)
    finally:
        registry.close()
