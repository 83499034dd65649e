"""Arguments as the alignment sees them: a literal skeleton with value names left out, the
values read (`app.programs.graph`), and a reader's spelling of the whole argument."""

from __future__ import annotations

from collections.abc import Hashable
from enum import IntEnum
from operator import itemgetter
from typing import Any

from pydantic import BaseModel

from app.archive.tensors import dtype_name
from app.programs.graph import values as value_names
from schema.models import (
    Argument,
    ArgumentAsComplex,
    ArgumentAsCustomObj,
    ArgumentAsDevice,
    ArgumentAsGraph,
    ArgumentAsLayout,
    ArgumentAsMemoryFormat,
    ArgumentAsNestedTensors,
    ArgumentAsNone,
    ArgumentAsOptionalTensor,
    ArgumentAsOptionalTensors,
    ArgumentAsScalarType,
    ArgumentAsStringToArgument,
    ArgumentAsSymBool,
    ArgumentAsSymBools,
    ArgumentAsSymFloat,
    ArgumentAsSymFloats,
    ArgumentAsSymInt,
    ArgumentAsSymInts,
    ArgumentAsTensor,
    ArgumentAsTensors,
    CustomObjArgument,
    OptionalTensorArgumentAsTensor,
    SymBoolArgumentAsName,
    SymFloatArgumentAsName,
    SymIntArgumentAsName,
    TensorArgument,
)

#: The fields holding the value names an argument reads (the leaves `app.programs.graph`
#: reads); a skeleton leaves them out, so that only literals and structure are compared.
_NAME_FIELDS: dict[type[BaseModel], str] = {
    TensorArgument: "name",
    CustomObjArgument: "name",
    SymIntArgumentAsName: "as_name",
    SymFloatArgumentAsName: "as_name",
    SymBoolArgumentAsName: "as_name",
}


def freeze(value: Any) -> Hashable:
    """A hashable, type-faithful copy of a literal (floats by repr, so NaN equals NaN), value
    names left out."""
    if isinstance(value, BaseModel):
        skip = _NAME_FIELDS.get(type(value))
        fields = tuple((k, freeze(v)) for k, v in value.__dict__.items() if k != skip)
        return (type(value).__name__, fields)
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, freeze(v)) for k, v in sorted(value.items(), key=itemgetter(0)))
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, IntEnum):
        return int(value)
    assert isinstance(value, Hashable)
    return value


_TENSOR = ("tensor",)


def split_argument(arg: Argument) -> tuple[Hashable, list[str]]:
    """An argument's literal skeleton (value references left out) and the values it reads, in
    the skeleton's order (a map's entries by key)."""
    if isinstance(arg, ArgumentAsTensor):
        return _TENSOR, [arg.as_tensor.name]
    if isinstance(arg, ArgumentAsStringToArgument):
        entries = sorted(arg.as_string_to_argument.items(), key=itemgetter(0))
        names = [name for _, entry in entries for name in value_names(entry)]
        return (arg.kind, freeze(arg.value)), names
    return (arg.kind, freeze(arg.value)), value_names(arg)


def render_argument(arg: Argument) -> str:
    """An argument as a reader wants it: value names, and literals in Python spelling."""
    if isinstance(arg, ArgumentAsTensor):
        return arg.as_tensor.name
    if isinstance(arg, ArgumentAsNone):
        return "None"
    if isinstance(arg, ArgumentAsTensors):
        return f"[{', '.join(t.name for t in arg.as_tensors)}]"
    if isinstance(arg, ArgumentAsOptionalTensors):
        return f"[{', '.join(_optional(t) for t in arg.as_optional_tensors)}]"
    if isinstance(arg, ArgumentAsOptionalTensor):
        return _optional(arg.as_optional_tensor)
    if isinstance(arg, ArgumentAsNestedTensors):
        rows = ", ".join(f"[{', '.join(t.name for t in r)}]" for r in arg.as_nested_tensors)
        return f"[{rows}]"
    if isinstance(arg, ArgumentAsSymInt | ArgumentAsSymFloat | ArgumentAsSymBool):
        return _sym_text(arg.value)
    if isinstance(arg, ArgumentAsSymInts | ArgumentAsSymFloats | ArgumentAsSymBools):
        return f"[{', '.join(_sym_text(item) for item in arg.value)}]"
    if isinstance(arg, ArgumentAsScalarType):
        return f"torch.{dtype_name(arg.as_scalar_type)}"
    if isinstance(arg, ArgumentAsMemoryFormat | ArgumentAsLayout):
        return f"torch.{arg.value.name}"
    if isinstance(arg, ArgumentAsDevice):
        index = arg.as_device.index
        return repr(arg.as_device.type if index is None else f"{arg.as_device.type}:{index}")
    if isinstance(arg, ArgumentAsGraph):
        return f"<graph {arg.as_graph.name}>"
    if isinstance(arg, ArgumentAsCustomObj):
        return arg.as_custom_obj.name
    if isinstance(arg, ArgumentAsComplex):
        return f"complex({arg.as_complex.real!r}, {arg.as_complex.imag!r})"
    if isinstance(arg, ArgumentAsStringToArgument):
        items = sorted(arg.as_string_to_argument.items(), key=itemgetter(0))
        return "{" + ", ".join(f"{k!r}: {render_argument(v)}" for k, v in items) + "}"
    return repr(arg.value)


def _optional(item: Any) -> str:
    return item.as_tensor.name if isinstance(item, OptionalTensorArgumentAsTensor) else "None"


def _sym_text(item: Any) -> str:
    return str(item.value) if item.kind == "as_name" else repr(item.value)


def operator_name(target: str) -> str:
    """A target without its overload: ``torch.ops.aten.add`` for ``torch.ops.aten.add.Tensor``."""
    parts = target.split(".")
    return ".".join(parts[:4]) if target.startswith("torch.ops.") and len(parts) > 4 else target
