"""Sanity tests of the exported-program zoo against torch's own serializer."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._export.serde import serialize as torch_serde
from torch.export.graph_signature import InputKind, OutputKind

from tests.zoo import (
    DYNAMIC_BATCH_MAX,
    DYNAMIC_BATCH_MIN,
    DYNAMIC_FEAT_MAX,
    DYNAMIC_FEAT_MIN,
    PROGRAM_NAMES,
    ZooProgram,
    archive_bytes,
    build_program,
    cached_zoo,
    outputs_close,
    register_custom_ops,
    torch_json,
)

REPO_ROOT = Path(__file__).resolve().parent.parent

REQUIRED_NAMES = {
    "linear_bn_train",
    "conv",
    "dynamic",
    "cond",
    "custom_op",
    "multi_out",
    "symint_out",
    "constants",
    "pytree",
    "dtypes",
    "decomposed",
    "preserve_sig",
    "shared_sub",
    "scalar_floats",
}


def _program(name: str) -> ZooProgram:
    return cached_zoo()[name]


def _json(name: str) -> str:
    return torch_json(_program(name).ep).decode("utf-8")


def test_zoo_has_every_required_program() -> None:
    zoo = cached_zoo()
    assert set(zoo) == set(PROGRAM_NAMES)
    assert REQUIRED_NAMES <= set(zoo)
    assert all(program.name == name for name, program in zoo.items())


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_torch_json_serializes(name: str) -> None:
    doc = json.loads(torch_json(_program(name).ep))
    assert doc["graph_module"]["graph"]["nodes"]


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_torch_serde_round_trip(name: str) -> None:
    program = _program(name)
    expected = program.run()
    restored = torch_serde.deserialize(torch_serde.serialize(program.ep))
    assert outputs_close(restored.module()(*program.args, **program.kwargs), expected)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_archive_round_trip(name: str) -> None:
    program = _program(name)
    expected = program.run()
    loaded = torch.export.load(io.BytesIO(archive_bytes(program.ep)))
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), expected)


def test_scalar_floats_json_has_negative_infinity() -> None:
    assert "-Infinity" in _json("scalar_floats")


def test_dynamic_range_constraints() -> None:
    ep = _program("dynamic").ep
    bounds = {(int(vr.lower), int(vr.upper)) for vr in ep.range_constraints.values()}
    assert (DYNAMIC_BATCH_MIN, DYNAMIC_BATCH_MAX) in bounds
    assert (DYNAMIC_FEAT_MIN, DYNAMIC_FEAT_MAX) in bounds
    serialized = json.loads(_json("dynamic"))["range_constraints"].values()
    json_bounds = {(rc["min_val"], rc["max_val"]) for rc in serialized}
    assert json_bounds == bounds


def test_cond_json_has_subgraphs() -> None:
    assert "as_graph" in _json("cond")


def test_custom_op_json_names_its_namespace() -> None:
    assert "pt2zoo" in _json("custom_op")


def test_linear_bn_train_mutates_buffers() -> None:
    specs = _program("linear_bn_train").ep.graph_signature.output_specs
    mutated = {spec.target for spec in specs if spec.kind == OutputKind.BUFFER_MUTATION}
    assert mutated == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}


def test_run_leaves_program_state_unchanged() -> None:
    program = _program("linear_bn_train")
    before = {k: v.clone() for k, v in program.ep.state_dict.items()}
    program.run()
    assert outputs_close(dict(program.ep.state_dict), before)


def test_constants_lifts_tensor_constant_and_non_persistent_buffer() -> None:
    signature = _program("constants").ep.graph_signature
    kinds = {spec.target: spec.kind for spec in signature.input_specs}
    assert kinds["table"] == InputKind.CONSTANT_TENSOR
    assert kinds["offset"] == InputKind.BUFFER
    assert "offset" in signature.non_persistent_buffers


def test_dtypes_carries_unusual_dtypes() -> None:
    ep = _program("dtypes").ep
    dtypes = {t.dtype for t in ep.state_dict.values()}
    assert {torch.bfloat16, torch.int8, torch.bool, torch.complex64} <= dtypes


def test_symint_out_returns_an_int() -> None:
    _, size = _program("symint_out").run()
    assert size == 10


def test_preserved_module_call_signatures() -> None:
    def preserved(name: str) -> set[str]:
        graph = _program(name).ep.module_call_graph
        return {entry.fqn for entry in graph if entry.signature is not None}

    assert "sub" in preserved("preserve_sig")
    assert "sub" not in preserved("shared_sub")
    assert {"sub", "sub@1"} <= preserved("preserve_sig_shared")


def test_build_program_is_deterministic() -> None:
    first, second = build_program("dtypes"), build_program("dtypes")
    assert outputs_close(dict(first.ep.state_dict), dict(second.ep.state_dict))
    assert outputs_close(first.args, second.args)


def test_outputs_close_distinguishes_values() -> None:
    t = torch.tensor([1.0, float("-inf")])
    assert outputs_close({"a": (t, [3])}, {"a": (t.clone(), [3])})
    assert not outputs_close(t, t + 1)
    assert not outputs_close(t, t.double())
    assert not outputs_close((t,), [t])
    assert not outputs_close(torch.tensor([True]), torch.tensor([False]))
    assert not outputs_close(3, 4)


def test_register_custom_ops_is_idempotent() -> None:
    register_custom_ops()
    register_custom_ops()
    assert hasattr(torch.ops.pt2zoo, "fused_gelu")


def test_custom_op_archive_loads_in_fresh_process(tmp_path: Path) -> None:
    program = _program("custom_op")
    archive = tmp_path / "custom_op.pt2"
    archive.write_bytes(archive_bytes(program.ep))
    inputs = tmp_path / "inputs.pt"
    torch.save({"args": program.args, "expected": program.run()}, inputs)
    script = f"""
import sys
import torch
from tests.zoo import outputs_close, register_custom_ops
register_custom_ops()
register_custom_ops()
ep = torch.export.load({str(archive)!r})
data = torch.load({str(inputs)!r})
sys.exit(0 if outputs_close(ep.module()(*data["args"]), data["expected"]) else 1)
"""
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
