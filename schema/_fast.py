"""A second validator of the same models for documents that are valid as they stand.

Each torch union is validated through a tagged union whose discriminator (`_base.arm_tag`) is a
Python function: per union value pydantic-core converts the value to Python objects and calls
it, about a microsecond on every argument of every node. Here the same models are validated
with every such union as a plain union that tries its arms in turn, the common arms first.

It accepts exactly what the models accept, with equal results: an arm is a model with one
required field that refuses other keys, so it can only match an object whose single key is
its tag, the one arm the discriminator would pick. What it refuses it reports with pydantic's
generic union errors, not ours, so `schema.io.read` uses it only to answer valid documents and
reads any other again with the models' own validator, for the errors, paths and extras.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic_core import SchemaValidator

from schema._base import arm_tag

#: Arms tried first, most frequent first in real programs (tensor arguments, then sizes and
#: scalars); a failed arm costs a few hundred nanoseconds, so the order matters little
#: beyond the first few.
_COMMON = (
    "as_tensor",
    "as_int",
    "as_ints",
    "as_float",
    "as_bool",
    "as_expr",
    "as_name",
    "as_sym_ints",
    "as_tensors",
    "as_scalar_type",
    "as_device",
    "as_layout",
    "as_memory_format",
    "as_none",
    "parameter",
    "user_output",
    "user_input",
    "buffer",
)
_RANK = {tag: i for i, tag in enumerate(_COMMON)}


@cache
def fast_validator(model: type[BaseModel]) -> SchemaValidator:
    """A validator of `model` without Python discriminators (see the module doc)."""
    schema = model.__pydantic_core_schema__
    return without_discriminators(schema, _config_of(schema, model))


def without_discriminators(schema: Any, config: Any = None) -> SchemaValidator:
    """A validator of the core schema `schema` with its arm-tag unions tried arm by arm."""
    # Without `_use_prebuilt=False` pydantic-core would reuse each model class's own validator,
    # unions and all, for every model it meets.
    return SchemaValidator(_rewritten(schema), config, _use_prebuilt=False)


def _rewritten(node: Any) -> Any:
    """`node` (a core schema or part of one) with every arm-tag union tried arm by arm."""
    if isinstance(node, list):
        return [_rewritten(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _rewritten(value) for key, value in node.items()}
    if out.get("type") == "tagged-union" and out.get("discriminator") is arm_tag:
        choices: dict[str, Any] = out["choices"]
        order = sorted(choices, key=lambda tag: _RANK.get(tag, len(_RANK)))
        union = {
            "type": "union",
            "choices": [choices[tag] for tag in order],
            "mode": "left_to_right",
            # the models are strict by their own config; a strict union would impose it on
            # everything below it, which the tagged union does not
            "strict": False,
            # one error instead of every arm's: the errors are never shown
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
