"""Parameters, buffers and constants of two programs: what was added, removed or changed.

Structure (name, kind, dtype, shape) comes from the documents; values from a `WeightSource`
per side when there is one. Two stored tensors are equal when their tensor digests are; when
they differ and dtype and shape agree, numpy reads both views (strides and offset honoured,
bounds checked first) and says how far apart the values are. Digests name the stored bytes,
so a re-laid-out tensor with equal values is a ``layout`` change, not a ``value`` change.

A weight whose stored digest is found under one other name only on the other side is a rename:
a removed and an added one, or a shift (a block inserted into a list of layers moves the later
layers' weights one index up: ``layers.3.*`` becomes ``layers.4.*``, and ``layers.3.*`` holds
the new block's weights, which are added, not changed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.archive import dtype_name
from app.programs.diff.models import ValueStats, WeightChange, WeightChangeKind, WeightKind
from app.programs.digest import tensor_digest
from app.programs.inspect.common import graph_weights, static_shape
from app.programs.values import (
    CHUNK,
    StoredTensor,
    WeightSource,
    as_numbers,
    elements,
    numpy_readable,
)
from schema.models import ExportedProgram, ScalarType

# ---------------------------------------------------------------- values


def value_stats(
    old: StoredTensor, old_data: bytes, new: StoredTensor, new_data: bytes
) -> ValueStats | str:
    """How far apart two views of one dtype and shape are; a reason when they cannot be read."""
    if old.dtype != new.dtype or old.shape != new.shape:
        return "the stored views differ in dtype or shape; value statistics skipped"
    dtype = old.dtype
    assert dtype is not None
    if not numpy_readable(dtype):
        return f"numpy cannot read {dtype_name(dtype)}; value statistics skipped"
    a_all = elements(old, old_data)
    b_all = elements(new, new_data)
    if isinstance(a_all, str):
        return a_all
    if isinstance(b_all, str):
        return b_all
    numel = int(a_all.size)
    differing = 0
    max_abs = 0.0
    norm_a = 0.0
    norm_d = 0.0
    for start in range(0, numel, CHUNK):
        a = as_numbers(a_all[start : start + CHUNK], dtype)
        b = as_numbers(b_all[start : start + CHUNK], dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            diff = np.abs(a - b)
        diff[same] = 0.0
        # A NaN against a number (or opposite infinities) is as far apart as it gets.
        diff[np.isnan(diff)] = np.inf
        differing += int(np.count_nonzero(~same))
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
        finite = np.abs(a[np.isfinite(a)])
        norm_a += float(np.sum(finite * finite))
        with np.errstate(over="ignore"):
            norm_d += float(np.sum(diff * diff))
    rel = None if norm_a == 0.0 else float(np.sqrt(norm_d) / np.sqrt(norm_a))
    if rel is None and norm_d == 0.0 and numel:
        rel = 0.0
    return ValueStats(numel=numel, differing=differing, max_abs_diff=max_abs, rel_norm=rel)


# ---------------------------------------------------------------- comparison


@dataclass
class _Weight:
    name: str
    kind: WeightKind
    persistent: bool | None
    dtype: ScalarType | None
    shape: tuple[int, ...] | None
    stored: StoredTensor | None


def _weights(doc: ExportedProgram, source: WeightSource | None) -> dict[str, _Weight]:
    stored = dict(source.tensors()) if source is not None else {}
    found: dict[str, _Weight] = {}
    for g in graph_weights(doc):
        found[g.name] = _Weight(
            g.name,
            g.kind,
            g.persistent if g.kind == "buffer" else None,
            g.meta.dtype if g.meta is not None else None,
            static_shape(g.meta) if g.meta is not None else None,
            stored.get(g.name),
        )
    for name, tensor in stored.items():
        if name not in found:
            found[name] = _Weight(name, tensor.kind, None, tensor.dtype, tensor.shape, tensor)
    for w in found.values():
        if w.stored is not None and w.stored.dtype is not None:
            w.dtype = w.dtype if w.dtype is not None else w.stored.dtype
            w.shape = w.shape if w.shape is not None else w.stored.shape
    return found


def _digest(source: WeightSource, stored: StoredTensor) -> str | None:
    if not stored.readable:
        return None
    assert stored.dtype is not None
    assert stored.shape is not None
    assert stored.strides is not None
    return tensor_digest(
        int(stored.dtype),
        list(stored.shape),
        list(stored.strides),
        stored.offset,
        source.chunks(stored.name),
    )


@dataclass
class Weights:
    """The weight changes by kind, how new names map to old ones, and what was not compared."""

    changes: list[WeightChange]
    #: new weight name -> old weight name, for weights that were renamed.
    renamed: dict[str, str]
    notes: list[str]


class _Side:
    def __init__(self, doc: ExportedProgram, source: WeightSource | None) -> None:
        self.source = source
        self.weights = _weights(doc, source)
        self._digests: dict[str, str | None] = {}

    def digest(self, name: str) -> str | None:
        if name not in self._digests:
            w = self.weights[name]
            self._digests[name] = (
                None if self.source is None or w.stored is None else _digest(self.source, w.stored)
            )
        return self._digests[name]


def _dtype(dtype: ScalarType | None) -> str | None:
    return None if dtype is None else dtype_name(dtype)


def _shape(shape: tuple[int, ...] | None) -> list[int] | None:
    return None if shape is None else list(shape)


def compare_weights(
    old_doc: ExportedProgram,
    new_doc: ExportedProgram,
    old_source: WeightSource | None,
    new_source: WeightSource | None,
) -> Weights:
    """Every weight added, removed, renamed or changed in kind, dtype, shape or value."""
    old, new = _Side(old_doc, old_source), _Side(new_doc, new_source)
    values = old_source is not None and new_source is not None
    notes: list[str] = []
    gone = [n for n in old.weights if n not in new.weights]
    fresh = [n for n in new.weights if n not in old.weights]
    renamed = _renames(old, new, gone, fresh) if values else {}
    sources = set(renamed.values())
    # a name both sides have is removed (added) when its old (new) tensor went elsewhere and
    # nothing took its place (came from elsewhere)
    removed = [
        n for n in old.weights if n not in sources and (n not in new.weights or n in renamed)
    ]

    changes: list[WeightChange] = []
    for name in removed:
        w = old.weights[name]
        changes.append(
            WeightChange(
                name=name,
                kind=w.kind,
                changes=["removed"],
                old_kind=w.kind,
                old_dtype=_dtype(w.dtype),
                old_shape=_shape(w.shape),
                old_digest=old.digest(name) if values else None,
            )
        )
    for name in new.weights:
        kept = name in old.weights and name not in sources
        before = renamed.get(name, name if kept else None)
        if before is None:
            w = new.weights[name]
            changes.append(
                WeightChange(
                    name=name,
                    kind=w.kind,
                    changes=["added"],
                    new_kind=w.kind,
                    new_dtype=_dtype(w.dtype),
                    new_shape=_shape(w.shape),
                    new_digest=new.digest(name) if values else None,
                )
            )
            continue
        change = _compare(old, before, new, name, values, notes)
        if change is not None:
            changes.append(change)
    return Weights(changes, renamed, notes)


def _renames(old: _Side, new: _Side, removed: list[str], added: list[str]) -> dict[str, str]:
    """New name -> old name of each tensor found under another name on the other side: among
    the removed and added names, and the names both sides have with other values (a shift)."""
    both = [n for n in new.weights if n in old.weights and old.digest(n) != new.digest(n)]
    removed, added = [*removed, *both], [*added, *both]
    by_digest: dict[str, list[str]] = {}
    for name in removed:
        digest = old.digest(name)
        if digest is not None:
            by_digest.setdefault(digest, []).append(name)
    found: dict[str, str] = {}
    claimed: dict[str, int] = {}
    for name in added:
        digest = new.digest(name)
        if digest is not None and len(by_digest.get(digest, ())) == 1:
            claimed[digest] = claimed.get(digest, 0) + 1
            found[name] = by_digest[digest][0]
    # A digest two added weights share is no rename: which one it became is a guess.
    return {n: o for n, o in found.items() if claimed[new.digest(n) or ""] == 1}


def _compare(
    old: _Side, old_name: str, new: _Side, new_name: str, values: bool, notes: list[str]
) -> WeightChange | None:
    a, b = old.weights[old_name], new.weights[new_name]
    kinds: list[WeightChangeKind] = []
    if old_name != new_name:
        kinds.append("renamed")
    if a.kind != b.kind:
        kinds.append("kind")
    if a.persistent is not None and b.persistent is not None and a.persistent != b.persistent:
        kinds.append("persistent")
    if a.dtype != b.dtype:
        kinds.append("dtype")
    if a.shape != b.shape:
        kinds.append("shape")
    stats: ValueStats | None = None
    note: str | None = None
    old_digest = new_digest = None
    if values:
        old_digest, new_digest = old.digest(old_name), new.digest(new_name)
        if old_digest is None or new_digest is None:
            note = f"values not compared: {_unreadable(a, b)}"
            notes.append(f"{new_name}: {note}")
        elif old_digest != new_digest and "dtype" not in kinds and "shape" not in kinds:
            assert a.stored is not None
            assert b.stored is not None
            assert old.source is not None
            assert new.source is not None
            result = value_stats(
                a.stored, old.source.data(old_name), b.stored, new.source.data(new_name)
            )
            if isinstance(result, str):
                kinds.append("value")
                note = result
            else:
                stats = result
                kinds.append("value" if result.differing else "layout")
    if not kinds:
        return None
    return WeightChange(
        name=new_name,
        kind=b.kind,
        changes=kinds,
        old_kind=a.kind,
        new_kind=b.kind,
        old_dtype=_dtype(a.dtype),
        new_dtype=_dtype(b.dtype),
        old_shape=_shape(a.shape),
        new_shape=_shape(b.shape),
        renamed_from=old_name if old_name != new_name else None,
        old_digest=old_digest,
        new_digest=new_digest,
        stats=stats,
        note=note,
    )


def _unreadable(a: _Weight, b: _Weight) -> str:
    for side, w in (("old", a), ("new", b)):
        if w.stored is None:
            return f"the {side} side stores no tensor {w.name!r}"
        if not w.stored.readable:
            return f"the {side} side stores {w.name!r} as a pickle or with a symbolic view"
    return "unreadable"
