"""A second validator of the same models for documents that are valid as they stand.

Each torch union is validated through a tagged union whose discriminator (`_base.arm_tag`) is a
Python function: per union value pydantic-core converts the whole value to Python objects and
calls it. Where one arm holds most values of a union (a tensor argument; a parameter input),
this validator first tries that arm as a plain model and only then the tagged union, which
saves the conversion and the call on most of a program's arguments.

It accepts exactly what the models accept, with equal results: the arm is a model with one
required field that refuses other keys, so it matches only an object whose single key is its
tag, which the tagged union would hand to the same model; anything else is the tagged union's
to decide. What it refuses it reports with a generic union error, so `schema.io.read` uses it
only to answer valid documents and reads any other again with the models' own validator, for
the errors, paths and extras.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic_core import SchemaValidator

from schema._base import arm_tag

#: The arm tried before the discriminator, in unions where one arm holds most values and its
#: payload is an object: the discriminator's cost is mostly converting that payload to Python.
#: Other arms stay behind the discriminator: a refused arm costs about as much as the call,
#: and pydantic-core copies the whole value into each error it makes on the way.
_FIRST = frozenset(("as_tensor", "parameter"))


@cache
def fast_validator(model: type[BaseModel]) -> SchemaValidator:
    """A validator of `model` that tries the common arm of each union first (see the module doc)."""
    schema = model.__pydantic_core_schema__
    return common_arm_first(schema, _config_of(schema, model))


def common_arm_first(schema: Any, config: Any = None) -> SchemaValidator:
    """A validator of the core schema `schema` that tries the common arm of each union first."""
    rewritten = _rewritten(schema)
    try:
        # without it pydantic-core would reuse each model class's own validator, unions and all
        return SchemaValidator(rewritten, config, _use_prebuilt=False)
    except TypeError:  # a pydantic-core without the keyword: what it reuses validates alike
        return SchemaValidator(rewritten, config)


def _rewritten(node: Any) -> Any:
    """`node` (a core schema or part of one) with the common arm of each arm-tag union first."""
    if isinstance(node, list):
        return [_rewritten(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _rewritten(value) for key, value in node.items()}
    if out.get("type") == "tagged-union" and out.get("discriminator") is arm_tag:
        first = _FIRST.intersection(out["choices"])
        if first:
            (tag,) = first
            tagged = {key: value for key, value in out.items() if key != "ref"}
            union = {
                "type": "union",
                "choices": [out["choices"][tag], tagged],
                "mode": "left_to_right",
                # the models are strict by their own config; a strict union would impose it on
                # everything below it, which the tagged union does not
                "strict": False,
                # one error instead of both choices': the errors are never shown
                "custom_error_type": out["custom_error_type"],
                "custom_error_message": out["custom_error_message"],
            }
            if "ref" in out:
                union["ref"] = out["ref"]
            return union
    return out


def _config_of(schema: Mapping[str, Any], model: type[BaseModel]) -> Any:
    """The core config the model's own validator was built with (its model schema's)."""
    found = [schema.get("schema", schema), *schema.get("definitions", ())]
    for node in found:
        if node.get("type") == "model" and node.get("cls") is model:
            return node.get("config")
    return None
