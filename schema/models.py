"""The wire models of torch's export schema 8.x, one per torch type, with their history.

Every field carries `Wire(id, since, until)`: torch's field id and the schema versions it
lived in (facts read off torch's released `schema.yaml` files). A torch union is a type alias
`Annotated[ArmA | ArmB | ..., OneOf(name)]` over `Arm` models named `<Union><Arm>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, WrapValidator

from schema._base import Arm, OneOf, Struct, Version, Wire, WireFloat
from schema._compact import SharedMapValues, SharedScalarStructs, SharedSymInts

V5_3: Version = (5, 3)
V7_3: Version = (7, 3)
V8_2: Version = (8, 2)
V8_7: Version = (8, 7)
V8_8: Version = (8, 8)
V8_14: Version = (8, 14)
V8_15: Version = (8, 15)
V8_17: Version = (8, 17)
V8_20: Version = (8, 20)

W = Wire


# ---------------------------------------------------------------- enums


class ScalarType(IntEnum):
    """Tensor element types."""

    UNKNOWN = 0
    BYTE = 1
    CHAR = 2
    SHORT = 3
    INT = 4
    LONG = 5
    HALF = 6
    FLOAT = 7
    DOUBLE = 8
    COMPLEXHALF = 9
    COMPLEXFLOAT = 10
    COMPLEXDOUBLE = 11
    BOOL = 12
    BFLOAT16 = 13
    UINT16 = 28
    FLOAT8E4M3FN = 29
    FLOAT8E5M2 = 30
    FLOAT8E4M3FNUZ = 31
    FLOAT8E5M2FNUZ = 32
    FLOAT8E8M0FNU = 33
    UINT32 = 34
    UINT64 = 35


class Layout(IntEnum):
    """Tensor layouts."""

    Unknown = 0
    SparseCoo = 1
    SparseCsr = 2
    SparseCsc = 3
    SparseBsr = 4
    SparseBsc = 5
    _mkldnn = 6
    Strided = 7


class MemoryFormat(IntEnum):
    """Tensor memory formats."""

    Unknown = 0
    ContiguousFormat = 1
    ChannelsLast = 2
    ChannelsLast3d = 3
    PreserveFormat = 4


class ArgumentKind(IntEnum):
    """How an argument was passed to an operator."""

    UNKNOWN = 0
    POSITIONAL = 1
    KEYWORD = 2


#: The enums with their history: the version each type appeared in and each value's since.
ENUMS: dict[type[IntEnum], tuple[Version, dict[IntEnum, Version]]] = {
    ScalarType: (
        (5, 1),
        {
            ScalarType.UINT16: V8_2,
            ScalarType.FLOAT8E4M3FN: V8_7,
            ScalarType.FLOAT8E5M2: V8_7,
            ScalarType.FLOAT8E4M3FNUZ: V8_14,
            ScalarType.FLOAT8E5M2FNUZ: V8_14,
            ScalarType.FLOAT8E8M0FNU: V8_20,
            ScalarType.UINT32: V8_20,
            ScalarType.UINT64: V8_20,
        },
    ),
    Layout: ((5, 1), {}),
    MemoryFormat: ((5, 1), {}),
    ArgumentKind: (V8_7, {}),
}


# ---------------------------------------------------------------- symbolic values


class Device(Struct):
    """A device such as ``cpu`` or ``cuda:0``."""

    #: shared between tensors (see `SharedDevice`), so never changed in place
    model_config = ConfigDict(frozen=True)

    type: Annotated[str, W(10)]
    index: Annotated[int | None, W(20)] = None


class SymExprHintAsInt(Arm):
    """The integer an int-valued expression took when it was traced."""

    #: shared between tensors (see `SymInts`), so never changed in place
    model_config = ConfigDict(frozen=True)

    as_int: Annotated[int, W(10)]


class SymExprHintAsBool(Arm):
    """The boolean a bool-valued expression took when it was traced."""

    #: shared between tensors (see `SymInts`), so never changed in place
    model_config = ConfigDict(frozen=True)

    as_bool: Annotated[bool, W(20)]


class SymExprHintAsFloat(Arm):
    """The float a float-valued expression took when it was traced."""

    #: shared between tensors (see `SymInts`), so never changed in place
    model_config = ConfigDict(frozen=True)

    as_float: Annotated[WireFloat, W(30)]


SymExprHint = Annotated[
    SymExprHintAsInt | SymExprHintAsBool | SymExprHintAsFloat, OneOf("SymExprHint")
]


class SymExpr(Struct):
    """A symbolic expression (sympy text) with an optional hint."""

    #: shared between tensors (see `SymInts`), so never changed in place
    model_config = ConfigDict(frozen=True)

    expr_str: Annotated[str, W(10)]
    hint: Annotated[SymExprHint | None, W(20)] = None


class SymIntAsExpr(Arm):
    """A symbolic size: an expression over the program's symbols."""

    #: shared between tensors (see `SymInts`), so never changed in place
    model_config = ConfigDict(frozen=True)

    as_expr: Annotated[SymExpr, W(10)]


class SymIntAsInt(Arm):
    """A concrete size."""

    #: shared between tensors (see `SymInts`), so never changed in place
    model_config = ConfigDict(frozen=True)

    as_int: Annotated[int, W(20)]


SymInt = Annotated[SymIntAsExpr | SymIntAsInt, OneOf("SymInt")]

#: A tensor's device: one shared instance per device (see schema._compact).
SharedDevice = Annotated[Device, WrapValidator(SharedScalarStructs(Device).validate)]
_SHARED = SharedSymInts(SymIntAsInt, SymIntAsExpr)
#: Tensor sizes and strides: read a list at a time, with shared entries (see schema._compact).
SymInts = Annotated[list[SymInt], WrapValidator(_SHARED.validate)]
#: A tensor's storage offset, a shared entry too.
SharedSymInt = Annotated[SymInt, WrapValidator(_SHARED.validate_one)]


class SymFloatAsExpr(Arm):
    """A symbolic float: an expression over the program's symbols."""

    as_expr: Annotated[SymExpr, W(10, V8_2)]


class SymFloatAsFloat(Arm):
    """A concrete float."""

    as_float: Annotated[WireFloat, W(20, V8_2)]


SymFloat = Annotated[SymFloatAsExpr | SymFloatAsFloat, OneOf("SymFloat", V8_2)]


class SymBoolAsExpr(Arm):
    """A symbolic boolean: an expression over the program's symbols."""

    as_expr: Annotated[SymExpr, W(10)]


class SymBoolAsBool(Arm):
    """A concrete boolean."""

    as_bool: Annotated[bool, W(20)]


SymBool = Annotated[SymBoolAsExpr | SymBoolAsBool, OneOf("SymBool")]


class TensorMeta(Struct):
    """Dtype, shape, strides, device and layout of a tensor value."""

    #: shared between tensor values (see `TensorMetas`), so never changed in place
    model_config = ConfigDict(frozen=True)

    dtype: Annotated[ScalarType, W(10)]
    sizes: Annotated[SymInts, W(20)]
    requires_grad: Annotated[bool, W(30)]
    device: Annotated[SharedDevice, W(40)]
    strides: Annotated[SymInts, W(50)]
    storage_offset: Annotated[SharedSymInt, W(60)]
    layout: Annotated[Layout, W(70)]


class SymIntArgumentAsName(Arm):
    """A symbolic integer value of the graph, by name."""

    as_name: Annotated[str, W(10)]


class SymIntArgumentAsInt(Arm):
    """An integer literal where a symbolic integer may stand."""

    as_int: Annotated[int, W(20)]


#: A graph's tensor metadata: one shared instance per wire form (see schema._compact).
TensorMetas = Annotated[dict[str, TensorMeta], WrapValidator(SharedMapValues(TensorMeta).validate)]


SymIntArgument = Annotated[SymIntArgumentAsName | SymIntArgumentAsInt, OneOf("SymIntArgument")]


class SymFloatArgumentAsName(Arm):
    """A symbolic float value of the graph, by name."""

    as_name: Annotated[str, W(10, V8_2)]


class SymFloatArgumentAsFloat(Arm):
    """A float literal where a symbolic float may stand."""

    as_float: Annotated[WireFloat, W(20, V8_2)]


SymFloatArgument = Annotated[
    SymFloatArgumentAsName | SymFloatArgumentAsFloat, OneOf("SymFloatArgument", V8_2)
]


class SymBoolArgumentAsName(Arm):
    """A symbolic boolean value of the graph, by name."""

    as_name: Annotated[str, W(10)]


class SymBoolArgumentAsBool(Arm):
    """A boolean literal where a symbolic boolean may stand."""

    as_bool: Annotated[bool, W(20)]


SymBoolArgument = Annotated[SymBoolArgumentAsName | SymBoolArgumentAsBool, OneOf("SymBoolArgument")]


# ---------------------------------------------------------------- arguments


class TensorArgument(Struct):
    """A reference to a tensor value by name."""

    name: Annotated[str, W(10)]


class TokenArgument(Struct):
    """A reference to an effect token by name."""

    __since__: ClassVar[Version] = V5_3

    name: Annotated[str, W(10, V5_3)]


class OptionalTensorArgumentAsTensor(Arm):
    """A present optional tensor: a tensor value, by name."""

    as_tensor: Annotated[TensorArgument, W(20)]


class OptionalTensorArgumentAsNone(Arm):
    """An absent optional tensor; torch writes its flag as true."""

    as_none: Annotated[bool, W(10)]


OptionalTensorArgument = Annotated[
    OptionalTensorArgumentAsTensor | OptionalTensorArgumentAsNone,
    OneOf("OptionalTensorArgument"),
]


class GraphArgument(Struct):
    """A subgraph passed to a higher-order operator."""

    name: Annotated[str, W(10)]
    graph: Annotated[Graph, W(20)]


class CustomObjArgument(Struct):
    """A reference to a script object by name and class."""

    name: Annotated[str, W(10)]
    class_fqn: Annotated[str, W(20)]


class ComplexValue(Struct):
    """A complex scalar."""

    __since__: ClassVar[Version] = V8_14

    real: Annotated[WireFloat, W(10, V8_14)]
    imag: Annotated[WireFloat, W(20, V8_14)]


class ArgumentAsNone(Arm):
    """An absent argument (``None``); torch writes its flag as true."""

    as_none: Annotated[bool, W(10)]


class ArgumentAsTensor(Arm):
    """A tensor value, by name."""

    as_tensor: Annotated[TensorArgument, W(20)]


class ArgumentAsTensors(Arm):
    """A list of tensor values, by name."""

    as_tensors: Annotated[list[TensorArgument], W(30)]


class ArgumentAsInt(Arm):
    """An integer literal."""

    as_int: Annotated[int, W(50)]


class ArgumentAsInts(Arm):
    """A list of integer literals."""

    as_ints: Annotated[list[int], W(70)]


class ArgumentAsFloat(Arm):
    """A float literal (``inf`` and ``nan`` as their wire strings)."""

    as_float: Annotated[WireFloat, W(80)]


class ArgumentAsFloats(Arm):
    """A list of float literals."""

    as_floats: Annotated[list[WireFloat], W(90)]


class ArgumentAsString(Arm):
    """A string literal."""

    as_string: Annotated[str, W(100)]


class ArgumentAsStrings(Arm):
    """A list of string literals."""

    as_strings: Annotated[list[str], W(101)]


class ArgumentAsSymInt(Arm):
    """A symbolic integer value by name, or an integer literal in its place."""

    as_sym_int: Annotated[SymIntArgument, W(110)]


class ArgumentAsSymInts(Arm):
    """A list of symbolic integers, each a value by name or a literal."""

    as_sym_ints: Annotated[list[SymIntArgument], W(120)]


class ArgumentAsScalarType(Arm):
    """A dtype (a `ScalarType`)."""

    as_scalar_type: Annotated[ScalarType, W(130)]


class ArgumentAsMemoryFormat(Arm):
    """A memory format (a `MemoryFormat`)."""

    as_memory_format: Annotated[MemoryFormat, W(140)]


class ArgumentAsLayout(Arm):
    """A tensor layout (a `Layout`)."""

    as_layout: Annotated[Layout, W(150)]


class ArgumentAsDevice(Arm):
    """A device."""

    as_device: Annotated[Device, W(160)]


class ArgumentAsBool(Arm):
    """A boolean literal."""

    as_bool: Annotated[bool, W(170)]


class ArgumentAsBools(Arm):
    """A list of boolean literals."""

    as_bools: Annotated[list[bool], W(180)]


class ArgumentAsSymBool(Arm):
    """A symbolic boolean value by name, or a boolean literal in its place."""

    as_sym_bool: Annotated[SymBoolArgument, W(182)]


class ArgumentAsSymBools(Arm):
    """A list of symbolic booleans, each a value by name or a literal."""

    as_sym_bools: Annotated[list[SymBoolArgument], W(184)]


class ArgumentAsGraph(Arm):
    """A subgraph (its name and graph) handed to a higher-order operator such as ``cond``."""

    as_graph: Annotated[GraphArgument, W(200)]


class ArgumentAsOptionalTensors(Arm):
    """A list of optional tensors, each a tensor value by name or none."""

    as_optional_tensors: Annotated[list[OptionalTensorArgument], W(190)]


class ArgumentAsCustomObj(Arm):
    """A script object value, by name and class."""

    as_custom_obj: Annotated[CustomObjArgument, W(210)]


class ArgumentAsOperator(Arm):
    """An operator, by its qualified name."""

    as_operator: Annotated[str, W(220)]


class ArgumentAsSymFloat(Arm):
    """A symbolic float value by name, or a float literal in its place."""

    as_sym_float: Annotated[SymFloatArgument, W(230, V8_2)]


class ArgumentAsSymFloats(Arm):
    """A list of symbolic floats, each a value by name or a literal."""

    as_sym_floats: Annotated[list[SymFloatArgument], W(240, V8_2)]


class ArgumentAsOptionalTensor(Arm):
    """One optional tensor: a tensor value by name, or none."""

    as_optional_tensor: Annotated[OptionalTensorArgument, W(250, V8_8)]


class ArgumentAsComplex(Arm):
    """A complex literal (real and imaginary parts)."""

    as_complex: Annotated[ComplexValue, W(260, V8_14)]


class ArgumentAsNestedTensors(Arm):
    """A list of lists of tensor values, by name."""

    as_nested_tensors: Annotated[list[list[TensorArgument]], W(270, V8_17)]


class ArgumentAsIntLists(Arm):
    """A list of lists of integer literals."""

    as_int_lists: Annotated[list[list[int]], W(280, V8_15)]


class ArgumentAsStringToArgument(Arm):
    """A map from strings to whole arguments (which may nest further)."""

    as_string_to_argument: Annotated[dict[str, Argument], W(290, V8_15)]


class ArgumentAsFloatLists(Arm):
    """A list of lists of float literals."""

    as_float_lists: Annotated[list[list[WireFloat]], W(300, V8_20)]


Argument = Annotated[
    ArgumentAsNone
    | ArgumentAsTensor
    | ArgumentAsTensors
    | ArgumentAsInt
    | ArgumentAsInts
    | ArgumentAsFloat
    | ArgumentAsFloats
    | ArgumentAsString
    | ArgumentAsStrings
    | ArgumentAsSymInt
    | ArgumentAsSymInts
    | ArgumentAsScalarType
    | ArgumentAsMemoryFormat
    | ArgumentAsLayout
    | ArgumentAsDevice
    | ArgumentAsBool
    | ArgumentAsBools
    | ArgumentAsSymBool
    | ArgumentAsSymBools
    | ArgumentAsGraph
    | ArgumentAsOptionalTensors
    | ArgumentAsCustomObj
    | ArgumentAsOperator
    | ArgumentAsSymFloat
    | ArgumentAsSymFloats
    | ArgumentAsOptionalTensor
    | ArgumentAsComplex
    | ArgumentAsNestedTensors
    | ArgumentAsIntLists
    | ArgumentAsStringToArgument
    | ArgumentAsFloatLists,
    OneOf("Argument"),
]


#: A kind of graph value an argument can name (each has its own metadata map in a graph).
ValueKind = Literal["tensor", "sym_int", "sym_bool", "sym_float", "custom_obj"]


@dataclass(frozen=True)
class ValueSlots:
    """Where an Argument arm names graph values, as torch's serializer (``_get_argument``) and
    canonical form (``replace_use``, ``rename_def``) read them."""

    kind: ValueKind
    #: how the slots sit in the arm's payload: 0 the payload is one slot, 1 a list of slots,
    #: 2 a list of lists of slots
    depth: Literal[0, 1, 2]
    #: None: each slot is a struct whose ``name`` is the value's name; else each slot is a union
    #: and only this arm of it names a value (its payload is the name, or a struct with a
    #: ``name``), its other arms being literals (an int, an absent optional tensor)
    named_by: type[Arm] | None = None

    @property
    def name_path(self) -> tuple[str, ...]:
        """The fields from a slot (the `named_by` arm, when there is one) down to the name."""
        if self.named_by is None:
            return ("name",)
        tag = self.named_by.__tag__
        return (tag,) if self.named_by.model_fields[tag].annotation is str else (tag, "name")


#: Every Argument arm with the value slots it holds (None: it names no value of its own). The
#: passes that read or rename values (app.programs.graph, app.programs.rename) derive their
#: tables from this one, and a test keeps its keys equal to the arms of `Argument`.
ARGUMENT_ARMS: dict[type[Arm], ValueSlots | None] = {
    ArgumentAsNone: None,
    ArgumentAsTensor: ValueSlots("tensor", 0),
    ArgumentAsTensors: ValueSlots("tensor", 1),
    ArgumentAsInt: None,
    ArgumentAsInts: None,
    ArgumentAsFloat: None,
    ArgumentAsFloats: None,
    ArgumentAsString: None,
    ArgumentAsStrings: None,
    ArgumentAsSymInt: ValueSlots("sym_int", 0, SymIntArgumentAsName),
    ArgumentAsSymInts: ValueSlots("sym_int", 1, SymIntArgumentAsName),
    ArgumentAsScalarType: None,
    ArgumentAsMemoryFormat: None,
    ArgumentAsLayout: None,
    ArgumentAsDevice: None,
    ArgumentAsBool: None,
    ArgumentAsBools: None,
    ArgumentAsSymBool: ValueSlots("sym_bool", 0, SymBoolArgumentAsName),
    ArgumentAsSymBools: ValueSlots("sym_bool", 1, SymBoolArgumentAsName),
    # a subgraph is walked as a graph of its own (app.programs.graph), not as an argument's values
    ArgumentAsGraph: None,
    ArgumentAsOptionalTensors: ValueSlots("tensor", 1, OptionalTensorArgumentAsTensor),
    ArgumentAsCustomObj: ValueSlots("custom_obj", 0),
    ArgumentAsOperator: None,
    ArgumentAsSymFloat: ValueSlots("sym_float", 0, SymFloatArgumentAsName),
    ArgumentAsSymFloats: ValueSlots("sym_float", 1, SymFloatArgumentAsName),
    ArgumentAsOptionalTensor: ValueSlots("tensor", 0, OptionalTensorArgumentAsTensor),
    ArgumentAsComplex: None,
    ArgumentAsNestedTensors: ValueSlots("tensor", 2),
    ArgumentAsIntLists: None,
    # holds whole arguments, each read through this table in turn
    ArgumentAsStringToArgument: None,
    ArgumentAsFloatLists: None,
}


class NamedArgument(Struct):
    """An operator input: the schema's argument name and its value."""

    name: Annotated[str, W(10)]
    arg: Annotated[Argument, W(20)]
    kind: Annotated[ArgumentKind | None, W(30, V8_7)] = None


# ---------------------------------------------------------------- graph


class Node(Struct):
    """One call in the graph: operator target, inputs, outputs and metadata."""

    target: Annotated[str, W(10)]
    inputs: Annotated[list[NamedArgument], W(20)]
    outputs: Annotated[list[Argument], W(30)]
    metadata: Annotated[dict[str, str], W(40)]
    is_hop_single_tensor_return: Annotated[bool | None, W(50, V8_7)] = None
    name: Annotated[str | None, W(60, V8_17)] = None


class Graph(Struct):
    """A graph: inputs, outputs, nodes and the metadata of every value."""

    inputs: Annotated[list[Argument], W(10)]
    outputs: Annotated[list[Argument], W(20)]
    nodes: Annotated[list[Node], W(30)]
    tensor_values: Annotated[TensorMetas, W(40)]
    sym_int_values: Annotated[dict[str, SymInt], W(50)]
    sym_bool_values: Annotated[dict[str, SymBool], W(60)]
    is_single_tensor_return: Annotated[bool, W(70)] = False
    custom_obj_values: Annotated[dict[str, CustomObjArgument], W(80)] = Field(default_factory=dict)
    sym_float_values: Annotated[dict[str, SymFloat], W(90, V8_2)] = Field(default_factory=dict)


# ---------------------------------------------------------------- signature


class UserInputSpec(Struct):
    """A user input of the program."""

    arg: Annotated[Argument, W(10)]


class ConstantValueAsNone(Arm):
    """A ``None`` constant input; torch writes its flag as true."""

    as_none: Annotated[bool, W(10, V5_3)]


class ConstantValueAsInt(Arm):
    """An integer constant input."""

    as_int: Annotated[int, W(20, V5_3)]


class ConstantValueAsFloat(Arm):
    """A float constant input."""

    as_float: Annotated[WireFloat, W(30, V5_3)]


class ConstantValueAsString(Arm):
    """A string constant input."""

    as_string: Annotated[str, W(40, V5_3)]


class ConstantValueAsBool(Arm):
    """A boolean constant input."""

    as_bool: Annotated[bool, W(50, V5_3)]


ConstantValue = Annotated[
    ConstantValueAsNone
    | ConstantValueAsInt
    | ConstantValueAsFloat
    | ConstantValueAsString
    | ConstantValueAsBool,
    OneOf("ConstantValue", V5_3),
]


class InputToConstantInputSpec(Struct):
    """A constant (non-tensor) input baked into the program."""

    __since__: ClassVar[Version] = V8_2

    name: Annotated[str, W(10, V8_2)]
    value: Annotated[ConstantValue, W(20, V8_2)]


class InputToParameterSpec(Struct):
    """A graph input bound to a parameter."""

    arg: Annotated[TensorArgument, W(10)]
    parameter_name: Annotated[str, W(20)]


class InputToBufferSpec(Struct):
    """A graph input bound to a buffer."""

    arg: Annotated[TensorArgument, W(10)]
    buffer_name: Annotated[str, W(20)]
    persistent: Annotated[bool, W(30)]


class InputToTensorConstantSpec(Struct):
    """A graph input bound to a lifted tensor constant."""

    arg: Annotated[TensorArgument, W(10)]
    tensor_constant_name: Annotated[str, W(20)]


class InputToCustomObjSpec(Struct):
    """A graph input bound to a script object."""

    arg: Annotated[CustomObjArgument, W(10)]
    custom_obj_name: Annotated[str, W(20)]


class InputTokenSpec(Struct):
    """A graph input that is an effect token."""

    __since__: ClassVar[Version] = V5_3

    arg: Annotated[TokenArgument, W(10, V5_3)]


class InputSpecUserInput(Arm):
    """A graph input the caller passes."""

    user_input: Annotated[UserInputSpec, W(10)]


class InputSpecParameter(Arm):
    """A graph input bound to one of the module's parameters."""

    parameter: Annotated[InputToParameterSpec, W(20)]


class InputSpecBuffer(Arm):
    """A graph input bound to one of the module's buffers."""

    buffer: Annotated[InputToBufferSpec, W(30)]


class InputSpecTensorConstant(Arm):
    """A graph input bound to a lifted tensor constant."""

    tensor_constant: Annotated[InputToTensorConstantSpec, W(40)]


class InputSpecCustomObj(Arm):
    """A graph input bound to a lifted script object."""

    custom_obj: Annotated[InputToCustomObjSpec, W(50)]


class InputSpecToken(Arm):
    """A graph input that is an effect token."""

    token: Annotated[InputTokenSpec, W(70, V5_3)]


class InputSpecConstantInput(Arm):
    """A graph input fixed to a constant value."""

    constant_input: Annotated[InputToConstantInputSpec, W(60, V5_3)]


InputSpec = Annotated[
    InputSpecUserInput
    | InputSpecParameter
    | InputSpecBuffer
    | InputSpecTensorConstant
    | InputSpecCustomObj
    | InputSpecToken
    | InputSpecConstantInput,
    OneOf("InputSpec"),
]


class UserOutputSpec(Struct):
    """A user output of the program."""

    arg: Annotated[Argument, W(10)]


class LossOutputSpec(Struct):
    """The loss output of a joint program."""

    arg: Annotated[TensorArgument, W(10)]


class BufferMutationSpec(Struct):
    """A graph output that writes back to a buffer."""

    arg: Annotated[TensorArgument, W(10)]
    buffer_name: Annotated[str, W(20)]


class ParameterMutationSpec(Struct):
    """A graph output that writes back to a parameter."""

    __since__: ClassVar[Version] = V8_14

    arg: Annotated[TensorArgument, W(10, V8_14)]
    parameter_name: Annotated[str, W(20, V8_14)]


class GradientToParameterSpec(Struct):
    """A gradient output for a parameter."""

    arg: Annotated[TensorArgument, W(10)]
    parameter_name: Annotated[str, W(20)]


class GradientToUserInputSpec(Struct):
    """A gradient output for a user input."""

    arg: Annotated[TensorArgument, W(10)]
    user_input_name: Annotated[str, W(20)]


class UserInputMutationSpec(Struct):
    """A graph output that writes back to a user input."""

    arg: Annotated[TensorArgument, W(10)]
    user_input_name: Annotated[str, W(20)]


class OutputTokenSpec(Struct):
    """A graph output that is an effect token."""

    __since__: ClassVar[Version] = V5_3

    arg: Annotated[TokenArgument, W(10, V5_3)]


class OutputSpecUserOutput(Arm):
    """A graph output the caller receives."""

    user_output: Annotated[UserOutputSpec, W(10)]


class OutputSpecLossOutput(Arm):
    """A graph output that is the loss (joint training graphs)."""

    loss_output: Annotated[LossOutputSpec, W(20)]


class OutputSpecBufferMutation(Arm):
    """A graph output written back to one of the module's buffers."""

    buffer_mutation: Annotated[BufferMutationSpec, W(30)]


class OutputSpecGradientToParameter(Arm):
    """A graph output that is the gradient of a parameter."""

    gradient_to_parameter: Annotated[GradientToParameterSpec, W(40)]


class OutputSpecGradientToUserInput(Arm):
    """A graph output that is the gradient of a user input."""

    gradient_to_user_input: Annotated[GradientToUserInputSpec, W(50)]


class OutputSpecUserInputMutation(Arm):
    """A graph output written back to a user input."""

    user_input_mutation: Annotated[UserInputMutationSpec, W(60)]


class OutputSpecToken(Arm):
    """A graph output that is an effect token."""

    token: Annotated[OutputTokenSpec, W(70, V5_3)]


class OutputSpecParameterMutation(Arm):
    """A graph output written back to one of the module's parameters."""

    parameter_mutation: Annotated[ParameterMutationSpec, W(80, V8_14)]


OutputSpec = Annotated[
    OutputSpecUserOutput
    | OutputSpecLossOutput
    | OutputSpecBufferMutation
    | OutputSpecGradientToParameter
    | OutputSpecGradientToUserInput
    | OutputSpecUserInputMutation
    | OutputSpecToken
    | OutputSpecParameterMutation,
    OneOf("OutputSpec"),
]


class GraphSignature(Struct):
    """How graph inputs and outputs map to user values, parameters, buffers and mutations."""

    input_specs: Annotated[list[InputSpec], W(10)]
    output_specs: Annotated[list[OutputSpec], W(20)]


class RangeConstraint(Struct):
    """The value range of a symbol; None means unbounded."""

    min_val: Annotated[int | None, W(10)]
    max_val: Annotated[int | None, W(20)]


class ModuleCallSignature(Struct):
    """The preserved calling convention of a submodule."""

    inputs: Annotated[list[Argument], W(10)]
    outputs: Annotated[list[Argument], W(20)]
    in_spec: Annotated[str, W(30)]
    out_spec: Annotated[str, W(40)]
    forward_arg_names: Annotated[list[str] | None, W(50, V8_2)] = None


class ModuleCallEntry(Struct):
    """One module of the call graph, with its signature when preserved."""

    fqn: Annotated[str, W(10)]
    signature: Annotated[ModuleCallSignature | None, W(30)] = None


class NamedTupleDef(Struct):
    """The field names of a namedtuple type used in a treespec."""

    __since__: ClassVar[Version] = V8_7

    field_names: Annotated[list[str], W(10, V8_7)]


class GraphModule(Struct):
    """The graph with its signature and module call graph."""

    graph: Annotated[Graph, W(10)]
    signature: Annotated[GraphSignature, W(50)]
    module_call_graph: Annotated[list[ModuleCallEntry], W(60)]
    metadata: Annotated[dict[str, str], W(40, V7_3)] = Field(default_factory=dict)
    treespec_namedtuple_fields: Annotated[dict[str, NamedTupleDef], W(70, V8_7)] = Field(
        default_factory=dict
    )


class SchemaVersion(Struct):
    """The schema version a document was written with."""

    major: Annotated[int, W(10)]
    minor: Annotated[int, W(20)]


class ExportedProgram(Struct):
    """A whole exported program: the document pt2serde reads and writes."""

    graph_module: Annotated[GraphModule, W(10)]
    opset_version: Annotated[dict[str, int], W(20)]
    range_constraints: Annotated[dict[str, RangeConstraint], W(30)]
    schema_version: Annotated[SchemaVersion, W(60)]
    verifiers: Annotated[list[str], W(70, V7_3)] = Field(default_factory=list)
    torch_version: Annotated[str, W(80, V7_3)] = "<=2.4"
    guards_code: Annotated[list[str], W(90, V8_14)] = Field(default_factory=list)


# ---------------------------------------------------------------- archive containers


class PayloadMeta(Struct):
    """Where one payload (weight, constant, custom object) lies in an archive."""

    __since__: ClassVar[Version] = V8_14

    path_name: Annotated[str, W(10, V8_14)]
    is_param: Annotated[bool, W(20, V8_14)]
    use_pickle: Annotated[bool, W(30, V8_14)]
    tensor_meta: Annotated[TensorMeta | None, W(40, V8_14)]


class PayloadConfig(Struct):
    """The payloads of an archive by fully qualified name."""

    __since__: ClassVar[Version] = V8_14

    config: Annotated[dict[str, PayloadMeta], W(10, V8_14)]


class AOTInductorModelPickleData(Struct):
    """What torch passes from an AOTInductor publishing pipeline to its predictor."""

    __since__: ClassVar[Version] = V8_7

    library_basename: Annotated[str, W(1, V8_7)]
    input_names: Annotated[list[str], W(2, V8_7)]
    output_names: Annotated[list[str], W(3, V8_7)]
    floating_point_input_dtype: Annotated[int | None, W(4, V8_7)] = None
    floating_point_output_dtype: Annotated[int | None, W(5, V8_7)] = None
    aot_inductor_model_is_cpu: Annotated[bool | None, W(6, V8_7)] = None


class ExternKernelNode(Struct):
    """A node run by an external kernel."""

    __since__: ClassVar[Version] = V8_7

    name: Annotated[str, W(10, V8_7)]
    node: Annotated[Node, W(20, V8_7)]


class ExternKernelNodes(Struct):
    """The external kernel nodes of a compiled model."""

    __since__: ClassVar[Version] = V8_7

    nodes: Annotated[list[ExternKernelNode], W(10, V8_7)]


class Program(Struct):
    """Removed in 8.14: a set of methods, each an exported program."""

    __since__: ClassVar[Version] = V8_7
    __until__: ClassVar[Version | None] = V8_14

    methods: Annotated[dict[str, ExportedProgram], W(200, V8_7, V8_14)]


class Model(Struct):
    """Removed in 8.14: a named program with delegates and tensor paths."""

    __since__: ClassVar[Version] = V8_7
    __until__: ClassVar[Version | None] = V8_14

    name: Annotated[str, W(10, V8_7, V8_14)]
    tensorPaths: Annotated[dict[str, str], W(20, V8_7, V8_14)]
    program: Annotated[Program, W(40, V8_7, V8_14)]
    delegates: Annotated[dict[str, Program], W(50, V8_7, V8_14)]
    deviceAllocationMap: Annotated[dict[str, str], W(60, V8_7, V8_14)]
    constantPaths: Annotated[dict[str, str], W(70, V8_7, V8_14)]


for _model in list(globals().values()):
    if isinstance(_model, type) and issubclass(_model, Struct | Arm):
        _model.model_rebuild()

#: Every struct and union of the history, by torch name.
STRUCTS: dict[str, type[Struct]] = {
    m.__name__: m
    for m in list(globals().values())
    if isinstance(m, type) and issubclass(m, Struct) and m is not Struct
}
UNIONS: dict[str, Any] = {
    "SymExprHint": SymExprHint,
    "SymInt": SymInt,
    "SymFloat": SymFloat,
    "SymBool": SymBool,
    "SymIntArgument": SymIntArgument,
    "SymFloatArgument": SymFloatArgument,
    "SymBoolArgument": SymBoolArgument,
    "OptionalTensorArgument": OptionalTensorArgument,
    "Argument": Argument,
    "ConstantValue": ConstantValue,
    "InputSpec": InputSpec,
    "OutputSpec": OutputSpec,
}
