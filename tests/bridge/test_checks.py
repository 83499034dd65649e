"""torch_check and the expression guard, on the zoo and on documents broken on purpose."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import schema
from app.bridge.checks import TorchCheck, torch_check
from app.bridge.exported import SerializedProgram, deserialize
from app.programs.screen import UnsafeProgram
from schema import Issue
from tests import zoo as zoo_source
from tests.zoo import PROGRAM_NAMES, register_custom_ops

Edit = Callable[[dict[str, Any]], None]


def _edited(program: SerializedProgram, edit: Edit) -> schema.ExportedProgram:
    data = program.doc.model_dump(mode="json")
    edit(data)
    return schema.ExportedProgram.model_validate(data, strict=False)


def _nodes(data: dict[str, Any]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = data["graph_module"]["graph"]["nodes"]
    return nodes


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_zoo_is_clean(name: str, serialized: dict[str, SerializedProgram]) -> None:
    register_custom_ops()
    program = serialized[name]
    assert torch_check(program.doc, program.tensors) == TorchCheck()


def test_unknown_operator_and_bad_arguments(serialized: dict[str, SerializedProgram]) -> None:
    def edit(data: dict[str, Any]) -> None:
        nodes = _nodes(data)
        nodes[1]["target"] = "torch.ops.aten.nonexistent_op.default"
        nodes[2]["inputs"][0]["name"] = "bogus"
        nodes[2]["inputs"][5]["arg"] = {"as_string": "fast"}
        nodes[2]["inputs"][1]["kind"] = schema.ArgumentKind.KEYWORD.value
        nodes[0]["target"] = "torch.ops.aten.linear"

    program = serialized["linear_bn_train"]
    result = torch_check(_edited(program, edit), program.tensors)
    at = "/graph_module/graph/nodes"
    bn = "aten._native_batch_norm_legit_functional.default"
    assert result == TorchCheck(
        issues=[
            Issue(
                "op-unresolved",
                f"{at}/0",
                "'torch.ops.aten.linear' is not torch.ops.<namespace>.<op>.<overload>",
            ),
            Issue(
                "op-unresolved",
                f"{at}/1",
                "'torch.ops.aten.nonexistent_op.default' does not exist in torch "
                f"{__import__('torch').__version__}",
            ),
            Issue("op-bad-arguments", f"{at}/2/inputs/0", f"{bn} has no argument 'bogus'"),
            Issue("op-bad-arguments", f"{at}/2/inputs/5", "'training' is bool, got as_string"),
            Issue(
                "op-bad-arguments",
                f"{at}/2/inputs",
                "positional arguments leave a gap in the schema's order",
            ),
            Issue("op-bad-arguments", f"{at}/2/inputs", "required argument 'input' is missing"),
        ],
        unchecked=[Issue("torch-verifier-failed", "", "not built: some operators do not resolve")],
    )


def test_keyword_only_argument_passed_by_position(serialized: dict[str, SerializedProgram]) -> None:
    program = serialized["dynamic"]
    add = next(i for i, n in enumerate(_nodes(program.doc.model_dump())) if "sum" in n["target"])

    def edit(data: dict[str, Any]) -> None:
        node = _nodes(data)[add]
        node["target"] = "torch.ops.aten.sum.dim_IntList"
        node["inputs"].append(
            {"name": "dtype", "arg": {"as_scalar_type": 7}, "kind": schema.ArgumentKind.POSITIONAL}
        )

    result = torch_check(_edited(program, edit), program.tensors)
    assert result.issues == [
        Issue(
            "op-bad-arguments",
            f"/graph_module/graph/nodes/{add}/inputs/3",
            "'dtype' is keyword-only but passed by position",
        )
    ]


def test_unregistered_namespace_is_an_issue_naming_what_to_set(
    serialized: dict[str, SerializedProgram],
) -> None:
    program = serialized["custom_op"]
    node = next(
        i for i, n in enumerate(_nodes(program.doc.model_dump())) if "pt2zoo" in n["target"]
    )

    def edit(data: dict[str, Any]) -> None:
        _nodes(data)[node]["target"] = "torch.ops.elsewhere.fused_gelu.default"

    result = torch_check(_edited(program, edit), program.tensors)
    path = f"/graph_module/graph/nodes/{node}"
    programs = Path(zoo_source.__file__)
    lines = programs.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "pt2zoo.fused_gelu(" in text)
    assert result == TorchCheck(
        issues=[
            Issue(
                "op-namespace-unregistered",
                path,
                "operator namespace 'elsewhere' is not registered in the torch worker, so torch "
                "cannot build the program: set PT2SERDE_WORKER_IMPORTS to the Python module "
                "whose import registers it (the module the exporting code imported to make "
                "elsewhere.fused_gelu exist; the document does not name it); the program calls "
                f"it from {programs}, line {line}, in forward",
            )
        ],
        namespaces_to_register=["elsewhere"],
        unchecked=[
            Issue(
                "torch-verifier-failed", "", "not built: namespace(s) elsewhere are not registered"
            ),
        ],
    )


def test_torch_namespaces_are_loaded_on_demand(serialized: dict[str, SerializedProgram]) -> None:
    """A namespace of torch's own that `import torch` leaves out is imported from torch, not
    reported; nothing named by the document is imported."""
    program = serialized["custom_op"]

    def edit(data: dict[str, Any]) -> None:
        for n in _nodes(data):
            if "pt2zoo" in n["target"]:
                n["target"] = "torch.ops.quantized_decomposed.nonexistent.default"

    result = torch_check(_edited(program, edit), program.tensors)
    assert [(i.code, i.message) for i in result.issues] == [
        (
            "op-unresolved",
            "'torch.ops.quantized_decomposed.nonexistent.default' does not exist in torch "
            f"{torch.__version__}",
        )
    ]
    assert result.namespaces_to_register == []


def test_verifier_failure_is_one_line(serialized: dict[str, SerializedProgram]) -> None:
    def edit(data: dict[str, Any]) -> None:
        for spec in data["graph_module"]["signature"]["output_specs"]:
            if "buffer_mutation" in spec:
                spec["buffer_mutation"]["buffer_name"] = "bn.weight"
                return

    program = serialized["linear_bn_train"]
    result = torch_check(_edited(program, edit), program.tensors)
    assert [(i.code, i.path) for i in result.issues] == [("torch-verifier-failed", "")]
    message = result.issues[0].message
    assert message.startswith("Buffer output getitem_3 does not point to a buffer that exists.")
    assert "\n" not in message
    assert "Traceback" not in message
    assert result.unchecked == []


def test_weight_problems_are_findings(serialized: dict[str, SerializedProgram]) -> None:
    program = serialized["conv"]
    tensors = {k: v for k, v in program.tensors.items() if k != "fc.bias"}
    result = torch_check(program.doc, tensors)
    assert result.issues == [
        Issue("weight-missing", "/fc.bias", "parameter 'fc.bias' (float32[5]) has no tensor")
    ]
    assert [(i.code, i.path) for i in result.unchecked] == [("torch-verifier-failed", "")]
    assert result.unchecked[0].message.startswith("not built: weights-mismatch:")


def test_result_round_trips_through_dicts() -> None:
    check = TorchCheck([Issue("a", "/b", "c")], ["ns"], [Issue("d", "", "e")])
    assert TorchCheck.from_dict(check.to_dict()) == check


def test_unsafe_expression_never_reaches_torch(serialized: dict[str, SerializedProgram]) -> None:
    payload = "__import__('os').system('touch /tmp/pt2serde-pwned')"

    def edit(data: dict[str, Any]) -> None:
        sizes = data["graph_module"]["graph"]["tensor_values"]["x"]["sizes"]
        sizes[0]["as_expr"]["expr_str"] = payload

    program = serialized["dynamic"]
    with pytest.raises(UnsafeProgram) as caught:
        deserialize(_edited(program, edit), program.tensors)
    assert caught.value.code == "unsafe-expression"
    assert [(i.code, i.path) for i in caught.value.issues] == [
        ("unsafe-expression", "/graph_module/graph/tensor_values/x/sizes/0/as_expr/expr_str")
    ]
