"""The operator registry: lookups, and the screen's targets held against torch's own resolution."""

from __future__ import annotations

import math
import operator
from typing import Any

import pytest
import torch

from app.programs import opset
from app.programs.opcheck import accepted_arms
from app.programs.screen import IMPORTING_PYTHON_TARGETS, UNSAFE_OPERATORS, target_problem

#: Spellings that reach an attribute of torch's operator objects (or worse), never an operator.
ESCAPES = (
    "torch.ops.aten.__class__.mro",
    "torch.ops.aten.__dict__.x",
    "torch.ops.aten.__getattr__.x",
    "torch.ops.aten.__init__.default",
    "torch.ops.aten._dir.default",
    "torch.ops.aten.name.default",
    "torch.ops.prim.name.default",
    "torch.ops.aten.add.__module__",
    "torch.ops.aten.add.__class__",
    "torch.ops.aten.add._op",
    "torch.ops.aten.add.overloads",
    "torch.ops.aten.add.default.__call__",
    "torch.ops.aten.add.default.__globals__",
    "torch.ops.load_library.x.y",
    "torch.ops.import_module.x.y",
    "torch.ops.loaded_libraries.x.y",
    "torch.ops.__class__.x.y",
    "torch.ops.__dict__.x.y",
    "torch.ops.__getattr__.x.y",
    "torch.ops.higher_order.cond.default",
    "torch.ops.higher_order.__class__",
    "torch.ops.higher_order.__dict__",
    "torch.ops.higher_order.cond.__call__",
    "torch.ops.higher_order._dir",
    "torch.ops.mylib.__init__.default",
    "torch.ops.mylib.op.__dict__",
    "torch.ops.mylib.__weird__.default",
    "torch.ops.mylib.op.__getattribute__",
    "torch.ops.__weird__.op.default",
    "torch.ops.aten",
    "torch.ops",
    "torch.ops.aten.add",
    "torch.ops.aten.add.default.default",
    "torch.ops.aten.add..default",
    "torch.ops.aten.add.default ",
    "torch.load",
    "torch.__builtins__",
    "builtins.eval",
    "_operator.attrgetter",
    "_operator.methodcaller",
    "math.__loader__",
    "builtins.round",
)


def test_lookup_reads_the_schema() -> None:
    add = opset.lookup("aten", "add", "Tensor")
    assert add is not None
    assert add.target == "torch.ops.aten.add.Tensor"
    assert [(a.name, a.type, a.default, a.kwarg_only) for a in add.arguments] == [
        ("self", "Tensor", None, False),
        ("other", "Tensor", None, False),
        ("alpha", "Scalar", "1", True),
    ]
    assert [(r.name, r.type, r.alias) for r in add.returns] == [("", "Tensor", None)]
    inplace = opset.lookup("aten", "add_", "Tensor")
    assert inplace is not None
    assert (inplace.arguments[0].alias, inplace.arguments[0].mutates) == ("a!", True)
    assert not inplace.arguments[1].mutates
    conv = opset.lookup("aten", "conv2d", "default")
    assert conv is not None
    assert [(a.type, a.default) for a in conv.arguments][2:4] == [
        ("Tensor?", "None"),
        ("SymInt[2]", "[1, 1]"),
    ]
    split = opset.lookup("aten", "split", "Tensor")
    assert split is not None
    assert (split.arguments[0].alias, split.returns[0].type, split.returns[0].alias) == (
        "a -> *",
        "Tensor[]",
        "a",
    )
    assert opset.lookup("aten", "add", "nope") is None
    assert opset.lookup("aten", "does_not_exist", "default") is None
    assert {"Tensor", "Scalar", "out"} <= set(opset.overloads("aten", "add"))


def test_registry_agrees_with_torch_on_a_sample() -> None:
    """Every 50th overload: the same argument names, defaults and kwarg-only flags as torch's.

    Other tests of the session register their own namespaces (the zoos' custom ops,
    quantized_decomposed) in this process; those are not torch's and are left out.
    """
    names = sorted(
        qualified
        for qualified in torch._C._dispatch_get_all_op_names()
        if opset.is_builtin_namespace(qualified.split("::")[0])
    )[::50]
    assert len(names) > 50
    for qualified in names:
        handle = torch._C._dispatch_find_schema_or_throw(*(qualified.split(".", 1) + [""])[:2])
        theirs = handle.schema()
        namespace, name = theirs.name.split("::")
        mine = opset.lookup(namespace, name, theirs.overload_name or "default")
        assert mine is not None, qualified
        assert [
            (a.name, a.kwarg_only, a.default is not None, a.alias is not None)
            for a in mine.arguments
        ] == [
            (a.name, a.kwarg_only, a.has_default_value(), a.alias_info is not None)
            for a in theirs.arguments
        ], qualified


def test_builtin_namespaces_are_those_torch_registers() -> None:
    registered = {name.split("::")[0] for name in torch._C._dispatch_get_all_op_names()}
    builtin = opset.builtin_namespaces()
    assert {"aten", "prims", "prim", "quantized", "_c10d_functional", "c10d_functional"} <= builtin
    # registered on demand by torch.ao.quantization.fx._decomposed, not by loading a program
    assert not opset.is_builtin_namespace("quantized_decomposed")
    assert not opset.is_builtin_namespace("pt2zoo")
    # this process may have registered more (the zoo's custom op), never fewer
    assert builtin - {"prim", "onnx"} <= registered
    assert {"cond", "while_loop", "auto_functionalized", "wrap_with_set_grad_enabled"} <= (
        opset.higher_order_names()
    )
    assert opset.higher_order_names() <= set(torch._ops._higher_order_ops)


def test_screen_accepts_every_dunder_operator_torch_registers() -> None:
    dunders = [
        (name, overload)
        for name in dir(torch.ops.aten)
        if name.startswith("__") and opset.has_operator("aten", name)
        for overload in opset.overloads("aten", name)
    ]
    assert ("__and__", "Tensor") in dunders
    assert ("__or__", "Tensor") in dunders
    assert ("__rshift__", "Scalar") in dunders
    for name, overload in dunders:
        target = f"torch.ops.aten.{name}.{overload}"
        assert target_problem(target) is None, target
        assert isinstance(getattr(getattr(torch.ops.aten, name), overload), torch._ops.OpOverload)


def test_every_registered_overload_passes_the_screen() -> None:
    count = 0
    for op in opset.schemas():
        assert (target_problem(op.target) is None) == (not op.unreachable), op.target
        count += 1
    # this process may have registered more (the zoo's custom op, inductor's prims when exporting)
    assert 4000 < count <= len(torch._C._jit_get_all_schemas())


def _torch_resolves(target: str) -> Any:
    """What torch's deserializer resolves a target to (its getattr walk from the root module)."""
    roots = {"torch": torch, "_operator": operator, "math": math}
    head, *names = target.split(".")
    found: Any = roots.get(head)
    for name in names:
        if found is None or not hasattr(found, name):
            return None
        found = getattr(found, name)
    return found


@pytest.mark.parametrize("target", ESCAPES)
def test_screen_refuses_attribute_escapes(target: str) -> None:
    assert target_problem(target) is not None
    # and none of them is an operator torch would have loaded
    resolved = _torch_resolves(target)
    assert not isinstance(resolved, torch._ops.OpOverload | torch._ops.HigherOrderOperator)


def test_custom_namespaces_are_let_through_to_registration() -> None:
    assert target_problem("torch.ops.quantized_decomposed.quantize_per_tensor.default") is None
    assert target_problem("torch.ops.mylib.fused.default") is None
    # unknown operators of builtin namespaces are semantic findings, not screen refusals
    assert target_problem("torch.ops.aten.does_not_exist.default") is None


def test_python_targets_resolve_to_themselves() -> None:
    targets = opset.python_targets()
    assert {"_operator.getitem", "_operator.add", "math.trunc", "torch.sym_max"} <= targets
    assert "torch._sym_sqrt" in targets  # what torch writes for torch.sym_sqrt
    assert "builtins.round" not in targets  # allowed by the verifier, but never read back
    for target in targets:
        # (those that import what their arguments name are refused: test_unsafe_operators.py)
        assert (target_problem(target) is None) == (target not in IMPORTING_PYTHON_TARGETS)
        assert callable(_torch_resolves(target)), target


def test_unsafe_operators_hold_every_filename_operator() -> None:
    filename_ops = {
        (op.namespace, op.name)
        for op in opset.schemas()
        if any(a.name == "filename" and a.type == "str" for a in op.arguments)
    }
    assert filename_ops == {("aten", "from_file"), ("aten", "save")}
    assert filename_ops <= UNSAFE_OPERATORS
    assert all(opset.has_operator(*pair) for pair in UNSAFE_OPERATORS)


@pytest.mark.parametrize(
    ("kind", "accepted", "refused"),
    [
        ("Tensor", {"as_tensor"}, {"as_int", "as_float", "as_string", "as_none"}),
        ("Tensor?", {"as_tensor", "as_none", "as_optional_tensor"}, {"as_tensors"}),
        ("SymInt[2]", {"as_ints", "as_sym_ints", "as_int"}, {"as_float", "as_none"}),
        ("int[]", {"as_ints", "as_sym_ints"}, {"as_int"}),
        ("int[1]?", {"as_ints", "as_int", "as_none"}, {"as_string"}),
        ("Tensor?[]", {"as_optional_tensors", "as_tensors"}, {"as_tensor"}),
        ("Tensor[]", {"as_tensors"}, {"as_tensor", "as_optional_tensors"}),
        ("ScalarType?", {"as_scalar_type", "as_none"}, {"as_int"}),
        ("Device?", {"as_device", "as_string", "as_none"}, {"as_int"}),
        ("str", {"as_string"}, {"as_strings", "as_none"}),
        ("Scalar", {"as_int", "as_float", "as_bool", "as_complex"}, {"as_tensor"}),
    ],
)
def test_accepted_arms(kind: str, accepted: set[str], refused: set[str]) -> None:
    arms = accepted_arms(kind)
    assert arms is not None
    assert accepted <= arms
    assert not refused & arms


def test_types_without_a_table_are_unchecked() -> None:
    assert accepted_arms("Scalar?[]") is None
    assert accepted_arms("t") is None
    assert accepted_arms("__torch__.torch.classes.quantized.LinearPackedParamsBase") is None


def test_numbers_stand_for_tensors_where_torch_wraps_them() -> None:
    x = torch.ones(2)
    for name, wraps in (("add", True), ("mul", True), ("gt", False), ("clamp", False)):
        op = opset.lookup("aten", name, "Tensor")
        assert op is not None
        assert op.numbers_as_tensors is wraps
        call = getattr(torch.ops.aten, name).Tensor
        if wraps:
            call(x, 2)
        else:
            with pytest.raises(RuntimeError, match="Expected a value of type"):
                call(x, 2)
    arms = accepted_arms("Tensor", numbers_as_tensors=True)
    assert arms is not None
    assert {"as_tensor", "as_int", "as_float", "as_bool"} <= arms
    assert accepted_arms("Tensor?", numbers_as_tensors=True) == arms | {
        "as_none",
        "as_optional_tensor",
    }
