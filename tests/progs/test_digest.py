"""Graph, tensor, weights and program digests: what changes them and what does not."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
import torch

import schema
from app.programs.canonical import canonical_bytes, canonicalize
from app.programs.digest import (
    DigestFailure,
    Digests,
    graph_digest,
    program_digest,
    tensor_digest,
    weights_digest,
)
from tests.progs import twin_a
from tests.zoo import torch_json

FLOAT = int(schema.ScalarType.FLOAT)
A = "a" * 64
B = "b" * 64


def _stored(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _digests(ep: torch.export.ExportedProgram) -> Digests:
    graph = graph_digest(canonicalize(schema.load(torch_json(ep))))
    items = []
    for name, t in ep.state_dict.items():
        assert t.dtype == torch.float32
        data = _stored(t)
        # Two chunks, as an archive reader streams them.
        chunks = [data[:5], data[5:]]
        items.append((name, tensor_digest(FLOAT, list(t.shape), list(t.stride()), 0, iter(chunks))))
    return Digests.of(graph, weights_digest(items))


def test_one_weight_byte_changes_weights_and_program_not_graph() -> None:
    torch.manual_seed(0)
    module = twin_a.Twin()
    args = (torch.randn(2, 4),)
    before = _digests(torch.export.export(module, args, strict=False))
    with torch.no_grad():
        raw = module.linear.weight.view(-1).view(torch.int32)
        raw[3] ^= 1
    after = _digests(torch.export.export(module, args, strict=False))
    assert after.graph == before.graph
    assert after.weights != before.weights
    assert after.program != before.program


def test_graph_digest_is_sha256_of_canonical_bytes() -> None:
    torch.manual_seed(0)
    ep = torch.export.export(twin_a.Twin(), (torch.randn(2, 4),), strict=False)
    doc = canonicalize(schema.load(torch_json(ep)))
    assert graph_digest(doc) == hashlib.sha256(canonical_bytes(doc)).hexdigest()


def test_weights_digest_ignores_input_order() -> None:
    items = [("b.weight", B), ("a.bias", A), ("a.weight", B)]
    assert weights_digest(items) == weights_digest(reversed(items))
    assert weights_digest(items) != weights_digest([("b.weight", A), ("a.bias", B), items[2]])
    assert weights_digest(items) != weights_digest(items[:2])


def test_weights_digest_follows_the_documented_format() -> None:
    expected = hashlib.sha256(
        b"pt2serde-weights-v1\0" + b"1:x" + A.encode() + "2:é".encode() + B.encode()
    ).hexdigest()
    assert weights_digest([("é", B), ("x", A)]) == expected


def test_tensor_header_tells_views_of_the_same_bytes_apart() -> None:
    data = bytes(range(24))
    views = [
        (FLOAT, [2, 3], [3, 1], 0),
        (FLOAT, [3, 2], [2, 1], 0),
        (FLOAT, [2, 3], [1, 2], 0),
        (FLOAT, [2, 3], [3, 1], 1),
        (FLOAT, [6], [1], 0),
        (int(schema.ScalarType.INT), [2, 3], [3, 1], 0),
        (FLOAT, [23], [1], 0),
    ]
    digests = {tensor_digest(*view, [data]) for view in views}
    assert len(digests) == len(views)


def test_tensor_digest_streams_chunks_in_the_documented_format() -> None:
    whole = tensor_digest(FLOAT, [2, 3], [3, 1], 4, [b"abcdef"])
    assert tensor_digest(FLOAT, [2, 3], [3, 1], 4, iter([b"ab", b"", b"cdef"])) == whole
    expected = hashlib.sha256(
        b"pt2serde-tensor-v1\0dtype=7;sizes=2,3;strides=3,1;offset=4\nabcdef"
    ).hexdigest()
    assert whole == expected
    scalar = hashlib.sha256(b"pt2serde-tensor-v1\0dtype=7;sizes=;strides=;offset=0\n").hexdigest()
    assert tensor_digest(FLOAT, [], [], 0, []) == scalar


def test_program_digest_follows_the_documented_format() -> None:
    expected = hashlib.sha256(f"pt2serde-program-v1\0{A}\0{B}".encode()).hexdigest()
    assert program_digest(A, B) == expected
    assert program_digest(B, A) != expected
    assert Digests.of(A, B) == Digests(A, B, expected)


@pytest.mark.parametrize(
    ("call", "code", "message"),
    [
        (
            lambda: weights_digest([("w", A), ("v", B), ("w", B)]),
            "duplicate-tensor-name",
            "tensor 'w' is listed twice",
        ),
        (
            lambda: weights_digest([("w", A.upper())]),
            "invalid-digest",
            f"tensor 'w': {A.upper()!r} is not a lowercase sha256 hex digest",
        ),
        (
            lambda: program_digest(A[:-1], B),
            "invalid-digest",
            f"graph digest: {A[:-1]!r} is not a lowercase sha256 hex digest",
        ),
        (
            lambda: program_digest(A, "nope"),
            "invalid-digest",
            "weights digest: 'nope' is not a lowercase sha256 hex digest",
        ),
        (
            lambda: tensor_digest(FLOAT, [2, 3], [1], 0, []),
            "invalid-tensor-view",
            "sizes [2, 3], strides [1] and offset 0 are not a tensor view",
        ),
        (
            lambda: tensor_digest(FLOAT, [-1], [1], 0, []),
            "invalid-tensor-view",
            "sizes [-1], strides [1] and offset 0 are not a tensor view",
        ),
        (
            lambda: tensor_digest(FLOAT, [1], [1], -2, []),
            "invalid-tensor-view",
            "sizes [1], strides [1] and offset -2 are not a tensor view",
        ),
    ],
    ids=[
        "duplicate",
        "uppercase",
        "short_graph",
        "bad_weights",
        "rank_mismatch",
        "negative_size",
        "negative_offset",
    ],
)
def test_bad_inputs_fail_with_codes(call: Callable[[], object], code: str, message: str) -> None:
    with pytest.raises(DigestFailure) as info:
        call()
    assert (info.value.code, info.value.message) == (code, message)
