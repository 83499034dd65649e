"""A graph's tensor metadata as shared entries (schema._compact.SharedMapValues): the same
models, values, errors and extras as the full validation, one frozen instance per wire form."""

from __future__ import annotations

import json
from typing import Annotated, Any

import orjson
import pytest
from pydantic import TypeAdapter, ValidationError, WrapValidator

import schema
from schema._compact import SharedMapValues
from schema.models import Graph, TensorMeta

_FULL: TypeAdapter[dict[str, TensorMeta]] = TypeAdapter(dict[str, TensorMeta])


def _meta(**changes: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "dtype": 7,
        "sizes": [{"as_int": 4}, {"as_expr": {"expr_str": "s0", "hint": {"as_int": 2}}}],
        "requires_grad": False,
        "device": {"type": "cpu", "index": None},
        "strides": [{"as_int": 1}, {"as_int": 4}],
        "storage_offset": {"as_int": 0},
        "layout": 7,
    }
    meta.update(changes)
    return meta


def _graph(metas: dict[str, Any]) -> bytes:
    # json writes ints past 64 bits, which orjson refuses
    text = json.dumps(
        {
            "inputs": [],
            "outputs": [],
            "nodes": [],
            "tensor_values": metas,
            "sym_int_values": {},
            "sym_bool_values": {},
        },
        separators=(",", ":"),
    )
    return text.encode()


_METAS: dict[str, Any] = {
    "a": _meta(),
    "b": _meta(),
    "c": _meta(dtype=6, requires_grad=True),
    "d": _meta(device={"type": "cpu"}),
    "e": _meta(device={"type": "cuda", "index": 1}),
    "f": _meta(sizes=[{"as_expr": {"expr_str": "s1", "hint": {"as_float": "NaN"}}}]),
    "g": _meta(sizes=[{"as_expr": {"expr_str": "s1", "hint": {"as_float": 1.5}}}]),
    "h": _meta(sizes=[{"as_int": 2**70}]),
    "i": _meta(sizes=[]),
}


def test_metas_read_as_the_full_validation_reads_them() -> None:
    data = _graph(_METAS)
    got = schema.load(data, Graph).tensor_values
    full = _FULL.validate_json(json.dumps(_METAS))
    assert list(got) == list(full)
    assert {k: schema.dump(v) for k, v in got.items()} == {
        k: schema.dump(v) for k, v in full.items()
    }
    assert [v.device.model_fields_set for v in got.values()] == [
        v.device.model_fields_set for v in full.values()
    ]


def test_equal_metas_are_one_frozen_instance() -> None:
    one = schema.load(_graph(_METAS), Graph).tensor_values
    two = schema.load(_graph({"x": _meta()}), Graph).tensor_values
    assert one["a"] is one["b"] is two["x"]
    assert one["c"] is not one["a"]
    assert one["d"] is not one["a"]
    # an entry orjson cannot write (an int past 64 bits) is read alone, the others still shared
    assert one["h"].sizes[0].as_int == 2**70
    with pytest.raises(ValidationError, match="frozen"):
        one["a"].requires_grad = True


@pytest.mark.parametrize("first", [True, False])
def test_a_non_finite_float_where_a_null_was_is_refused(first: bool) -> None:
    # orjson writes NaN as null: without the null check, NaN would share the null entry
    good = _graph({"x": _meta()})
    if first:
        schema.load(good, Graph)
    bad = good.replace(b'"index":null', b'"index":NaN')
    with pytest.raises(schema.DocumentInvalid) as err:
        schema.load(bad, Graph)
    assert [(i.code, i.path) for i in err.value.issues] == [
        ("wrong-type", "/tensor_values/x/device/index")
    ]


@pytest.mark.parametrize(
    ("meta", "code", "path"),
    [
        (_meta(dtype=999), "unknown-enum-value", "/tensor_values/b/dtype"),
        (_meta(dtype="7"), "unknown-enum-value", "/tensor_values/b/dtype"),
        (
            {k: v for k, v in _meta().items() if k != "layout"},
            "missing-field",
            "/tensor_values/b/layout",
        ),
        (_meta(sizes=[{"as_int": "4"}]), "wrong-type", "/tensor_values/b/sizes/0/as_int"),
        (_meta(sizes=[{}]), "union-no-arm", "/tensor_values/b/sizes/0"),
        (
            _meta(device={"type": "cpu", "index": "0"}),
            "wrong-type",
            "/tensor_values/b/device/index",
        ),
        (7, "wrong-type", "/tensor_values/b"),
        ([], "wrong-type", "/tensor_values/b"),
    ],
)
def test_bad_metas_fail_as_before(meta: Any, code: str, path: str) -> None:
    with pytest.raises(schema.DocumentInvalid) as err:
        schema.load(_graph({"a": _meta(), "b": meta, "c": _meta()}), Graph)
    assert [(i.code, i.path) for i in err.value.issues] == [(code, path)]


def test_every_bad_meta_is_reported() -> None:
    metas = {"a": _meta(dtype=999), "b": _meta(), "c": _meta(layout="x")}
    with pytest.raises(schema.DocumentInvalid) as err:
        schema.load(_graph(metas), Graph)
    assert [(i.code, i.path) for i in err.value.issues] == [
        ("unknown-enum-value", "/tensor_values/a/dtype"),
        ("unknown-enum-value", "/tensor_values/c/layout"),
    ]


def test_unknown_keys_in_a_meta_are_kept_and_not_shared() -> None:
    odd = _meta(later=1, device={"type": "cpu", "index": None, "soon": 2})
    data = _graph({"a": _meta(), "b": odd})
    read = schema.read(data, Graph)
    assert read.unknown_fields == ["/tensor_values/b/device/soon", "/tensor_values/b/later"]
    assert orjson.loads(schema.dump(read.document))["tensor_values"]["b"] == odd
    plain = schema.load(_graph({"a": _meta()}), Graph).tensor_values["a"]
    assert not plain.__pydantic_extra__
    assert not plain.device.__pydantic_extra__


def test_the_table_starts_again_past_its_limit() -> None:
    shared = SharedMapValues(TensorMeta, limit=2)
    adapter: TypeAdapter[dict[str, TensorMeta]] = TypeAdapter(
        Annotated[dict[str, TensorMeta], WrapValidator(shared.validate)]
    )
    metas = {str(n): _meta(sizes=[{"as_int": n}], strides=[{"as_int": 1}]) for n in range(5)}
    got = adapter.validate_json(json.dumps(metas))
    assert [m.sizes[0].as_int for m in got.values()] == list(range(5))
    assert 0 < len(shared.table) <= 2
