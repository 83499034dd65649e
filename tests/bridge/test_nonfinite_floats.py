"""Our models hold a NaN or an infinity as `schema.NonFinite`; torch's schema gets plain floats
(its serializer checks ``type(x) is float``)."""

from __future__ import annotations

import math

from torch._export.serde import schema as torch_schema

import schema
from app.bridge.torch_schema import _builders
from schema.models import ArgumentAsFloat, ArgumentAsFloatLists, ArgumentAsFloats


def test_non_finite_floats_reach_torch_as_plain_floats() -> None:
    scalar = schema.load(b'{"as_float": "-Infinity"}', ArgumentAsFloat)
    floats = schema.load(b'{"as_floats": [0.5, "NaN", "Infinity"]}', ArgumentAsFloats)
    lists = schema.load(b'{"as_float_lists": [["NaN"], [1.0, "-Infinity"]]}', ArgumentAsFloatLists)
    assert type(scalar.as_float) is schema.NonFinite
    convert = _builders().convert
    ours: torch_schema.Argument = convert(scalar)
    assert type(ours.as_float) is float
    assert ours.as_float == -math.inf
    values = convert(floats).as_floats + [x for row in convert(lists).as_float_lists for x in row]
    assert [type(v) for v in values] == [float] * 6
    assert str(values) == "[0.5, nan, inf, nan, 1.0, -inf]"
