"""Tensor sizes, strides and devices as shared entries (schema._compact): the same models, values,
errors and extras as the full validation, with shared, frozen entries."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

import schema
from schema.models import SymInt, SymIntAsExpr, SymIntAsInt, TensorMeta

_FULL: TypeAdapter[list[Any]] = TypeAdapter(list[SymInt])


def _meta(sizes: list[Any], strides: list[Any] | None = None) -> bytes:
    return orjson.dumps(
        {
            "dtype": 7,
            "sizes": sizes,
            "requires_grad": False,
            "device": {"type": "cpu", "index": None},
            "strides": strides if strides is not None else [{"as_int": 1}] * len(sizes),
            "storage_offset": {"as_int": 0},
            "layout": 7,
        }
    )


_ENTRIES: list[Any] = [
    {"as_int": 3},
    {"as_int": -1},
    {"as_int": 2**62},
    {"as_expr": {"expr_str": "s0"}},
    {"as_expr": {"expr_str": "s0", "hint": None}},
    {"as_expr": {"expr_str": "s0", "hint": {"as_int": 4}}},
    {"as_expr": {"expr_str": "s0", "hint": {"as_bool": True}}},
    {"as_expr": {"expr_str": "s0", "hint": {"as_float": 1}}},
    {"as_expr": {"expr_str": "s0", "hint": {"as_float": 1.0}}},
    {"as_expr": {"expr_str": "s0", "hint": {"as_float": "Infinity"}}},
    {"as_expr": {"expr_str": "2*s1", "hint": {"as_int": 8}}},
]


def test_entries_read_as_the_full_validation_reads_them() -> None:
    data = _meta(_ENTRIES)
    meta = schema.load(data, TensorMeta)
    full = _FULL.validate_json(orjson.dumps(_ENTRIES))
    assert meta.sizes == full
    assert [m.model_fields_set for m in meta.sizes] == [m.model_fields_set for m in full]
    assert [m.as_expr.model_fields_set for m in meta.sizes if isinstance(m, SymIntAsExpr)] == [
        m.as_expr.model_fields_set for m in full if isinstance(m, SymIntAsExpr)
    ]
    assert schema.dump(meta) == schema.dump(meta.model_copy(update={"sizes": full}))


def test_entries_are_shared_and_frozen() -> None:
    one = schema.load(_meta([{"as_int": 5}, {"as_expr": {"expr_str": "s9"}}]), TensorMeta)
    two = schema.load(_meta([{"as_int": 5}, {"as_expr": {"expr_str": "s9"}}]), TensorMeta)
    assert one.sizes[0] is two.sizes[0]
    assert one.sizes[1] is two.sizes[1]
    assert one.storage_offset is two.storage_offset
    assert isinstance(one.sizes[0], SymIntAsInt)
    with pytest.raises(ValidationError, match="frozen"):
        one.sizes[0].as_int = 6
    with pytest.raises(ValidationError, match="frozen"):
        one.sizes[1].as_expr.expr_str = "s8"


@pytest.mark.parametrize(
    ("entry", "code", "path"),
    [
        ({"as_int": "3"}, "wrong-type", "/sizes/1/as_int"),
        ({"as_int": True}, "wrong-type", "/sizes/1/as_int"),
        ({"as_int": 1.5}, "wrong-type", "/sizes/1/as_int"),
        ({"as_int": 1, "as_expr": {"expr_str": "s0"}}, "union-many-arms", "/sizes/1"),
        ({}, "union-no-arm", "/sizes/1"),
        ({"as_other": 1}, "union-unknown-arm", "/sizes/1"),
        ({"as_expr": {"hint": None}}, "missing-field", "/sizes/1/as_expr/expr_str"),
        ({"as_expr": {"expr_str": 3}}, "wrong-type", "/sizes/1/as_expr/expr_str"),
        (
            {"as_expr": {"expr_str": "s0", "hint": {"as_int": "x"}}},
            "wrong-type",
            "/sizes/1/as_expr/hint/as_int",
        ),
        (7, "wrong-type", "/sizes/1"),
    ],
)
def test_bad_entries_fail_as_before(entry: Any, code: str, path: str) -> None:
    with pytest.raises(schema.DocumentInvalid) as err:
        schema.load(_meta([{"as_int": 2}, entry]), TensorMeta)
    assert [(i.code, i.path) for i in err.value.issues] == [(code, path)]
    offset = orjson.loads(_meta([]))
    offset["storage_offset"] = entry
    with pytest.raises(schema.DocumentInvalid) as err:
        schema.load(orjson.dumps(offset), TensorMeta)
    at = path.replace("/sizes/1", "/storage_offset")
    assert [(i.code, i.path) for i in err.value.issues] == [(code, at)]


def test_unknown_keys_in_an_entry_are_kept() -> None:
    entry = {"as_expr": {"expr_str": "s0", "hint": {"as_int": 2}, "later": 1}}
    read = schema.read(_meta([{"as_int": 2}, entry]), TensorMeta)
    assert read.unknown_fields == ["/sizes/1/as_expr/later"]
    assert orjson.loads(schema.dump(read.document))["sizes"][1] == entry


def test_built_lists_are_kept_as_given() -> None:
    sizes = [SymIntAsInt(as_int=2), SymIntAsInt(as_int=3)]
    meta = schema.load(_meta([{"as_int": 2}]), TensorMeta).model_copy(update={"sizes": sizes})
    assert meta.sizes is sizes


def _with_device(device: Any) -> bytes:
    meta = orjson.loads(_meta([{"as_int": 2}]))
    meta["device"] = device
    return orjson.dumps(meta)


def test_devices_are_shared_frozen_and_read_as_before() -> None:
    one = schema.load(_with_device({"type": "cpu", "index": None}), TensorMeta)
    two = schema.load(_with_device({"type": "cpu", "index": None}), TensorMeta)
    bare = schema.load(_with_device({"type": "cpu"}), TensorMeta)
    cuda = schema.load(_with_device({"type": "cuda", "index": 1}), TensorMeta)
    assert one.device is two.device
    assert bare.device is not one.device
    assert bare.device.model_fields_set == {"type"}
    assert one.device.model_fields_set == {"type", "index"}
    assert (cuda.device.type, cuda.device.index) == ("cuda", 1)
    with pytest.raises(ValidationError, match="frozen"):
        one.device.index = 0


@pytest.mark.parametrize(
    ("device", "code", "path"),
    [
        ({"type": 3}, "wrong-type", "/device/type"),
        ({"type": "cpu", "index": True}, "wrong-type", "/device/index"),
        ({"index": 0}, "missing-field", "/device/type"),
        ("cpu", "wrong-type", "/device"),
    ],
)
def test_bad_devices_fail_as_before(device: Any, code: str, path: str) -> None:
    with pytest.raises(schema.DocumentInvalid) as err:
        schema.load(_with_device(device), TensorMeta)
    assert [(i.code, i.path) for i in err.value.issues] == [(code, path)]


def test_unknown_keys_of_a_device_are_kept() -> None:
    read = schema.read(_with_device({"type": "cpu", "index": None, "later": 1}), TensorMeta)
    assert read.unknown_fields == ["/device/later"]
    assert orjson.loads(schema.dump(read.document))["device"]["later"] == 1
