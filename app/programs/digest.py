"""Digests of a program: its canonical graph, its weights, and both together.

All digests are lowercase sha256 hex. Each hashed stream starts with its own versioned tag, so
a digest of one kind can never equal a digest of another kind over the same bytes.

- graph digest: sha256 of `canonical_bytes` of the document's `stable_form` (its canonical
  form with what torch's own load + save does not keep settled, so every round trip keeps it).
- tensor digest: sha256 of ``b"pt2serde-tensor-v1\\0"`` then the header
  ``dtype=<int>;sizes=<a,b,...>;strides=<a,b,...>;offset=<int>\\n`` (decimal ASCII, dtype the
  ScalarType number) then the stored bytes, streamed chunk by chunk.
- weights digest: sha256 of ``b"pt2serde-weights-v1\\0"`` then, in name order, each entry as
  ``<byte length of name>:<name UTF-8><64 hex digits of its tensor digest>``.
- program digest: sha256 of ``b"pt2serde-program-v1\\0<graph hex>\\0<weights hex>"``.

A tensor digest covers the whole storage as the archive stores it, not only the bytes its view
reads: that is what an archive member is, it needs no stride arithmetic (nor dtype sizes, nor
bit-packed dtypes), it streams, and the header still makes two views of one storage differ.
Two tensors equal in value but stored with different padding therefore differ; the digest
names the stored artifact, not the value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from app.failure import Failure
from app.programs.canonical import canonical_bytes
from schema import ExportedProgram

__all__ = [
    "DigestFailure",
    "Digests",
    "graph_digest",
    "program_digest",
    "tensor_digest",
    "weights_digest",
]

_TENSOR_TAG = b"pt2serde-tensor-v1\0"
_WEIGHTS_TAG = b"pt2serde-weights-v1\0"
_PROGRAM_TAG = b"pt2serde-program-v1\0"
_HEX = re.compile(r"[0-9a-f]{64}")


class DigestFailure(Failure):
    """Inputs a digest cannot be computed from (a malformed digest or view, a repeated name)."""


def graph_digest(canonical_doc: ExportedProgram) -> str:
    """sha256 hex of the canonical bytes; pass the output of `stable_form`."""
    return graph_digest_of(canonical_bytes(canonical_doc))


def graph_digest_of(canonical: bytes) -> str:
    """The graph digest of canonical bytes already made (serializing twice costs seconds)."""
    return hashlib.sha256(canonical).hexdigest()


def tensor_digest(
    dtype: int,
    sizes: list[int],
    strides: list[int],
    storage_offset: int,
    chunks: Iterable[bytes],
) -> str:
    """sha256 hex of the tagged view header then the stored bytes, fed chunk by chunk."""
    if len(sizes) != len(strides) or storage_offset < 0 or any(n < 0 for n in sizes):
        raise DigestFailure(
            "invalid-tensor-view",
            f"sizes {sizes}, strides {strides} and offset {storage_offset} are not a tensor view",
        )
    header = (
        f"dtype={dtype};sizes={','.join(map(str, sizes))};"
        f"strides={','.join(map(str, strides))};offset={storage_offset}\n"
    )
    h = hashlib.sha256(_TENSOR_TAG)
    h.update(header.encode("ascii"))
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def weights_digest(items: Iterable[tuple[str, str]]) -> str:
    """sha256 hex over (name, tensor digest) pairs in name order; the input order is irrelevant."""
    entries = sorted(items)
    h = hashlib.sha256(_WEIGHTS_TAG)
    previous: str | None = None
    for name, digest in entries:
        if name == previous:
            raise DigestFailure("duplicate-tensor-name", f"tensor {name!r} is listed twice")
        _check_hex(digest, f"tensor {name!r}")
        encoded = name.encode("utf-8")
        h.update(b"%d:" % len(encoded))
        h.update(encoded)
        h.update(digest.encode("ascii"))
        previous = name
    return h.hexdigest()


def program_digest(graph: str, weights: str) -> str:
    """sha256 hex of the graph digest and the weights digest together."""
    _check_hex(graph, "graph digest")
    _check_hex(weights, "weights digest")
    return hashlib.sha256(
        b"%s%s\0%s" % (_PROGRAM_TAG, graph.encode(), weights.encode())
    ).hexdigest()


def _check_hex(digest: str, what: str) -> None:
    if _HEX.fullmatch(digest) is None:
        raise DigestFailure(
            "invalid-digest", f"{what}: {digest!r} is not a lowercase sha256 hex digest"
        )


@dataclass(frozen=True, slots=True)
class Digests:
    """The three digests of a program."""

    graph: str
    weights: str
    program: str

    @classmethod
    def of(cls, graph: str, weights: str) -> Digests:
        """The digests of a program from its graph and weights digests."""
        return cls(graph, weights, program_digest(graph, weights))
