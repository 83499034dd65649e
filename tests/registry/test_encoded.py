"""Tensors stored encoded (byte planes and zstd) and as deltas against the parent version's:
a small real transformer and five full fine-tunes of it (a few AdamW steps each, every tensor
changed), in float32 and bfloat16, pushed, pulled and ranged byte for byte, collected, crashed
into, over both blob backends and both databases."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

import pytest
import torch
from sqlalchemy import select
from torch import nn

from app.registry import storing
from app.registry.blobs import Piece
from app.registry.encoding import MAGIC, frame_base
from app.registry.errors import RegistryFailure
from app.registry.objects import blob_objects, layout_of, object_bases
from app.registry.store import Registry
from tests.registry.conftest import (
    Backend,
    assert_served,
    check_consistent,
    objects_of,
    prepare,
    pull,
    race_gc,
    rewrite_members,
    stored_files,
    weight_members,
)
from tests.zoo import archive_bytes

VOCAB, WIDTH, LAYERS = 512, 128, 2
FINE_TUNES = 5
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class _Block(nn.Module):
    """Causal self-attention and an MLP, each behind a layer norm."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        heads = [t.unflatten(-1, (4, WIDTH // 4)).transpose(1, 2) for t in (q, k, v)]
        attended = nn.functional.scaled_dot_product_attention(*heads, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).flatten(-2))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


class _LM(nn.Module):
    """A tiny decoder-only language model."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(_Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _fine_tune(model: _LM, seed: int) -> None:
    """A few AdamW steps of next-token prediction on random text: every tensor moves a little."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(3):
        tokens = torch.randint(0, VOCAB, (4, 33), generator=generator)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _bytes_of(tensor: torch.Tensor) -> Callable[[bytes], bytes]:
    """A member's change to the tensor's bytes."""
    data = tensor.contiguous().view(torch.uint8).numpy().tobytes()
    return lambda _: data


@pytest.fixture(scope="module")
def series() -> dict[str, list[bytes]]:
    """Per dtype, the archives of a base model and of five fine-tunes, each of the one before."""
    torch.manual_seed(0)
    model = _LM()
    states = [{k: v.detach().clone() for k, v in model.state_dict().items()}]
    for step in range(FINE_TUNES):
        _fine_tune(model, step)
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    out: dict[str, list[bytes]] = {}
    for name, dtype in DTYPES.items():
        exported = torch.export.export(_LM().to(dtype).eval(), (torch.randint(0, VOCAB, (1, 8)),))
        base = archive_bytes(exported)
        members = weight_members(exported)
        out[name] = [
            rewrite_members(
                base,
                {member: _bytes_of(state[fqn].to(dtype)) for fqn, member in members.items()},
            )
            for state in states
        ]
    return out


def _push_all(registry: Registry, model: str, archives: list[bytes]) -> None:
    for archive in archives:
        registry.push(model, prepare(registry, archive))


def _stored(backend: Backend) -> int:
    return sum(listed.size for listed in backend.objects().listing())


def _encodings(registry: Registry) -> dict[str, tuple[str | None, int]]:
    with registry.db.read() as conn:
        rows = conn.execute(
            select(blob_objects.c.digest, blob_objects.c.encoding, blob_objects.c.depth)
        )
        return {r.digest: (r.encoding, int(r.depth)) for r in rows}


def _chain(registry: Registry, digest: str) -> list[str]:
    """The objects a read of `digest` opens, following each frame's base."""
    chain = [digest]
    while True:
        with registry.blobs.open(chain[-1]) as handle:
            head = handle.read(64)
        base = frame_base(head) if head.startswith(MAGIC) else None
        if base is None:
            return chain
        chain.append(base)


def _check_pulls(registry: Registry, model: str, archives: list[bytes], seed: int) -> None:
    """Every version pulls as pushed, and reads at random offsets give its bytes."""
    rng = random.Random(seed)
    for info in registry.versions(model).versions:
        upload = archives[info.version - 1]
        data = pull(registry, model, str(info.version))
        assert hashlib.sha256(data).hexdigest() == info.digests.archive
        assert_served(data, upload)
        _, handle = registry.open_content(model, str(info.version), "archive")
        with handle:
            for _ in range(12):
                start = rng.randrange(len(data))
                end = min(len(data), start + rng.choice([1, 3000, 1 << 20, 5 << 20]))
                handle.seek(start)
                assert handle.read(end - start) == data[start:end], (info.version, start, end)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_a_series_pulls_byte_for_byte_from_fewer_bytes(
    registry: Registry, backend: Backend, series: dict[str, list[bytes]], dtype: str
) -> None:
    """Every tensor is stored once encoded; each fine-tune's as a delta against its parent's;
    the series takes far fewer bytes than its archives; pulls and ranges are byte for byte."""
    archives = series[dtype]
    _push_all(registry, "lm", archives)
    _check_pulls(registry, "lm", archives, seed=len(dtype))
    encodings = _encodings(registry)
    assert "delta" in {e for e, _ in encodings.values()}
    stored = _stored(backend)
    assert stored == registry.usage().stored_bytes
    ratio = stored / sum(len(a) for a in archives)
    assert ratio <= (0.5 if dtype == "bfloat16" else 0.7), ratio


def test_a_bfloat16_model_alone_is_stored_smaller(
    registry: Registry, backend: Backend, series: dict[str, list[bytes]]
) -> None:
    archive = series["bfloat16"][0]
    _push_all(registry, "lm", [archive])
    assert {e for e, _ in _encodings(registry).values()} == {None, "planes"}
    usage = registry.usage()
    assert _stored(backend) == usage.stored_bytes
    assert usage.stored_bytes <= 0.85 * len(archive), (usage, len(archive))
    _check_pulls(registry, "lm", [archive], seed=1)


def test_chains_stay_within_the_bound(backend: Backend, series: dict[str, list[bytes]]) -> None:
    """With chains of at most 3 objects, the six versions' tensors are full every third."""
    registry = Registry(backend.settings(store_delta_chain=3))
    try:
        archives = series["float32"]
        _push_all(registry, "lm", archives)
        encodings = _encodings(registry)
        chains = {d: len(_chain(registry, d)) for d in encodings}
        assert max(chains.values()) == 3
        assert all(depth + 1 == chains[d] for d, (_, depth) in encodings.items())
        _check_pulls(registry, "lm", archives, seed=3)
    finally:
        registry.close()


def test_no_deltas_without_a_parent_or_with_chains_of_one(
    backend: Backend, series: dict[str, list[bytes]]
) -> None:
    registry = Registry(backend.settings(store_delta_chain=1))
    try:
        archives = series["float32"][:2]
        _push_all(registry, "lm", archives)
        assert "delta" not in {e for e, _ in _encodings(registry).values()}
        _check_pulls(registry, "lm", archives, seed=4)
    finally:
        registry.close()


def test_a_pull_whose_bases_were_deleted(
    registry: Registry, backend: Backend, series: dict[str, list[bytes]]
) -> None:
    """Deleting (and collecting) the versions a version's deltas rest on keeps the objects
    those deltas read; deleting it too collects everything."""
    archives = series["bfloat16"]
    _push_all(registry, "lm", archives)
    for version in range(1, len(archives)):
        registry.delete_version("lm", str(version), "superseded")
    registry.gc()
    last = registry.version("lm", str(len(archives)))
    needed = objects_of(registry, last.digests.archive, last.digests.graph)
    assert stored_files(backend)["blobs"] == sorted(needed)
    assert any(len(_chain(registry, d)) > 1 for d in needed)
    data = pull(registry, "lm", str(last.version))
    assert hashlib.sha256(data).hexdigest() == last.digests.archive
    registry.delete_version("lm", str(last.version), "gone")
    registry.gc()
    assert stored_files(backend)["blobs"] == []


def test_gc_racing_pushes_of_fine_tunes(backend: Backend, series: dict[str, list[bytes]]) -> None:
    """Two models' series pushed (each fine-tune a delta of the one before) while gc runs over
    and over with no grace: every version pulls, and the store holds exactly what they need."""
    race_gc(backend, series)


def test_a_push_failing_midway_leaves_nothing_dangling(
    registry: Registry,
    backend: Backend,
    series: dict[str, list[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fine-tune's push whose store fails after some of its objects went in records no
    object as present that is not stored; pushed again, it stores and pulls as any other."""
    archives = series["float32"][:3]
    _push_all(registry, "lm", archives[:1])
    put = registry.blobs.objects.put
    calls = 0

    def failing(piece: Piece, digest: str, replace: bool = False) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError("the disk is full")
        put(piece, digest, replace)

    monkeypatch.setattr(registry.blobs.objects, "put", failing)
    with pytest.raises(OSError, match="the disk is full"):
        registry.push("lm", prepare(registry, archives[1]))
    monkeypatch.undo()
    with registry.db.read() as conn:
        rows = conn.execute(select(blob_objects.c.digest).where(blob_objects.c.present))
        recorded = set(rows.scalars())
    assert recorded <= set(stored_files(backend)["blobs"])
    _push_all(registry, "lm", archives[1:])
    _check_pulls(registry, "lm", archives, seed=5)
    registry.close()
    assert check_consistent(backend) == {"lm": [1, 2, 3]}


def test_a_push_whose_base_was_collected_meanwhile_fails_cleanly(
    registry: Registry, series: dict[str, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent version deleted and collected between a push's encoding and its commit: the
    push fails (registry-unavailable) and, pushed again, stores the tensors whole."""
    archives = series["float32"][:2]
    _push_all(registry, "lm", archives[:1])
    upload = storing.upload

    def collected_meanwhile(*args: object) -> None:
        registry.delete_version("lm", "1", "superseded")
        registry.gc()
        upload(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(storing, "upload", collected_meanwhile)
    with pytest.raises(RegistryFailure) as failed:
        registry.push("lm", prepare(registry, archives[1]))
    assert failed.value.code == "registry-unavailable"
    monkeypatch.undo()
    info = registry.push("lm", prepare(registry, archives[1])).version
    assert "delta" not in {e for e, _ in _encodings(registry).values()}
    assert hashlib.sha256(pull(registry, "lm", str(info.version))).digest().hex() == (
        info.digests.archive
    )


def test_a_push_onto_a_named_parent(registry: Registry, series: dict[str, list[bytes]]) -> None:
    """`parent` names the version whose tensors the deltas rest on (a live one)."""
    archives = series["bfloat16"]
    _push_all(registry, "lm", archives[:1])
    with pytest.raises(RegistryFailure) as failed:
        registry.push("lm", prepare(registry, archives[2]), parent=7)
    assert failed.value.code == "version-not-found"
    _push_all(registry, "lm", archives[4:5])
    registry.push("lm", prepare(registry, archives[2]), parent=1)
    first, _, third = (registry.version("lm", str(v)) for v in (1, 2, 3))
    with registry.db.read() as conn:
        layout = layout_of(conn, third.digests.archive)
        assert layout is not None
        own = [h.digest for h in layout.holes]
        query = select(object_bases.c.base).where(object_bases.c.digest.in_(own))
        bases = set(conn.execute(query).scalars())
    assert bases
    assert bases <= objects_of(registry, first.digests.archive, first.digests.graph)
    _check_pulls(registry, "lm", [archives[0], archives[4], archives[2]], seed=6)
