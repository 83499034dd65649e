"""Tensor metas written once per dump (schema._wire.write_as_fragment): the same bytes as
pydantic's serializer and as the route without fragments, with a memo that lives for one call
in one thread."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

import schema
from schema import _wire
from schema.models import ExportedProgram, Graph, SymIntAsInt, TensorMeta
from tests.schema.test_shared_metas import _METAS, _graph

_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


def _pydantic(doc: BaseModel) -> bytes:
    return doc.__pydantic_serializer__.to_json(doc)


def _unshared(doc: BaseModel, option: int = 0) -> bytes:
    # outside a dump call a meta's `__wire__` is its fields: the route before fragments
    return orjson.dumps(doc, default=_wire.wire_of, option=option)


def _sorted(data: bytes) -> bytes:
    return orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS)


def _metas(doc: ExportedProgram) -> list[TensorMeta]:
    return list(doc.graph_module.graph.tensor_values.values())


@pytest.fixture(scope="module")
def docs(zoo_json: dict[str, bytes]) -> dict[str, ExportedProgram]:
    """Every zoo document, parsed."""
    return {name: schema.load(data, ExportedProgram) for name, data in zoo_json.items()}


def test_zoo_documents_are_written_as_before(docs: dict[str, ExportedProgram]) -> None:
    shared = 0
    for name, doc in docs.items():
        metas = _metas(doc)
        shared += len(metas) - len({id(m) for m in metas})
        expected = _pydantic(doc)
        assert schema.dump(doc) == expected == _unshared(doc), name
        assert schema.io.dump_sorted(doc) == _sorted(expected) == _unshared(doc, _SORTED), name
        assert _wire._CALLS.memo is None
    assert shared > 20  # the memo is used, not only filled


@pytest.mark.parametrize("name", sorted(_METAS))
def test_odd_metas_are_written_as_pydantic_writes_them(name: str) -> None:
    # the extreme ones (NaN hint, an int past 64 bits) each beside a plain shared meta
    graph = schema.load(_graph({"x": _METAS["a"], "y": _METAS[name], "z": _METAS["a"]}), Graph)
    expected = _pydantic(graph)
    assert schema.dump(graph) == expected
    assert schema.io.dump_sorted(graph) in (_sorted(expected), None)
    assert _wire._CALLS.memo is None


def test_a_meta_with_unknown_keys_is_written_with_them() -> None:
    meta = dict(_METAS["a"], unknown={"nested": [1, "NaN"]})
    graph = schema.load(_graph({"x": meta, "y": meta, "z": _METAS["a"]}), Graph)
    data = schema.dump(graph)
    assert data == _pydantic(graph)
    assert data.count(b'"unknown"') == 2


def test_a_meta_changed_between_two_dumps_is_written_anew(
    docs: dict[str, ExportedProgram],
) -> None:
    doc = docs["conv"].model_copy(deep=True)
    meta = _metas(doc)[0]
    first, first_sorted = schema.dump(doc), schema.io.dump_sorted(doc)
    # frozen, but its lists are not: what a cache kept past the call would miss
    meta.sizes.append(SymIntAsInt(as_int=12345))
    second = schema.dump(doc)
    assert second != first
    assert second == _pydantic(doc)
    assert b"12345" in second
    assert schema.io.dump_sorted(doc) == _sorted(second) != first_sorted


def test_a_meta_outside_a_dump_is_written_whole(docs: dict[str, ExportedProgram]) -> None:
    meta = _metas(docs["conv"])[0]
    assert _wire._CALLS.memo is None
    assert orjson.dumps(meta, default=_wire.wire_of) == _pydantic(meta)
    assert schema.dump(meta) == _pydantic(meta)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch every microsecond, so that dumps interleave inside orjson's callbacks."""
    was = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(was)


@pytest.mark.usefixtures("fast_switching")
def test_concurrent_dumps_each_get_their_own_bytes(docs: dict[str, ExportedProgram]) -> None:
    names = ["conv", *(n for n in sorted(docs) if n != "conv")][:2]
    jobs: list[tuple[Callable[[], bytes | None], bytes]] = []
    for name in names:
        doc = docs[name]
        expected = _pydantic(doc)
        jobs.append((partial(schema.dump, doc), expected))
        jobs.append((partial(schema.io.dump_sorted, doc), _sorted(expected)))
    wrong: list[Any] = []
    start = threading.Barrier(len(jobs))

    def run(job: Callable[[], bytes | None], expected: bytes) -> None:
        start.wait()
        for _ in range(30):
            if job() != expected:
                wrong.append(job)

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong
    assert _wire._CALLS.memo is None


def test_an_error_inside_a_dump_leaves_no_memo(
    docs: dict[str, ExportedProgram], monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = docs["conv"]
    calls: list[BaseModel] = []

    def failing(value: BaseModel) -> Any:
        calls.append(value)
        raise RuntimeError("while writing")

    monkeypatch.setattr(_wire, "fields_of", failing)
    # orjson hands the callback's error on as its own, and pydantic writes the document
    assert schema.dump(doc) == _pydantic(doc)
    assert schema.io.dump_sorted(doc) is None
    assert calls
    assert _wire._CALLS.memo is None
    with pytest.raises(KeyError), _wire.fragments(0):
        raise KeyError("inside the block")
    assert _wire._CALLS.memo is None
