"""One program digest across every round trip: torch's own load + save, our serialize (document
and safetensors) then deserialize, our .pt2 deserialize; and real differences still change it.

torch is the reference for "the same program": each round-tripped archive loads in torch and
gives bit-identical outputs to the original on the same inputs.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import schema
from app import operations as ops
from app.jobs.torch import job_deserialize_to_pt2
from app.programs.canonical import canonical_bytes, canonicalize, stable_form
from app.programs.diff import diff_programs
from app.programs.digest import Digests, graph_digest
from app.settings import Settings
from app.tensors.sources import TensorSource
from tests.progs.test_canonical import torch_stable
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes

SETTINGS = Settings()
#: Real programs whose digest torch's round trip used to change (storage offsets of fused
#: projections, an unbacked offset and its range, `_unused` node names, a stride sympy proves
#: constant) and GPT-2 itself.
REAL = ("gpt2", "llama_dynamic", "bart", "swin", "while_loop", "loops", "windows")

RoundTrip = Callable[[bytes, Path], bytes]


def digests(archive: bytes) -> Digests:
    with ops.open_source(archive, "zip", SETTINGS) as source:
        return ops.canonical(source, SETTINGS).digests


def torch_load_save(archive: bytes, _: Path) -> bytes:
    """torch.export.load, then torch.export.save."""
    return archive_bytes(torch.export.load(io.BytesIO(archive)))


def ours_safetensors(archive: bytes, folder: Path) -> bytes:
    """Our serialize (the document and a safetensors file), then our deserialize of both."""
    with ops.open_source(archive, "zip", SETTINGS) as source:
        document = schema.dump(ops.read_document(source, None, SETTINGS).doc)
        weights = ops.weights_safetensors(source)
    target = folder / "from-safetensors.pt2"
    job_deserialize_to_pt2(document, TensorSource(safetensors=weights), target)
    return target.read_bytes()


def ours_pt2(archive: bytes, folder: Path) -> bytes:
    """Our deserialize of the archive's own document and tensors."""
    path = folder / "in.pt2"
    path.write_bytes(archive)
    target = folder / "from-pt2.pt2"
    with ops.open_source(path, "zip", SETTINGS) as source:
        document = schema.dump(ops.read_document(source, None, SETTINGS).doc)
        job_deserialize_to_pt2(document, ops.weights_from(None, source, None), target)
    return target.read_bytes()


ROUND_TRIPS: dict[str, RoundTrip] = {
    "torch": torch_load_save,
    "ours-safetensors": ours_safetensors,
    "ours-pt2": ours_pt2,
}


def outputs(archive: bytes, program: ZooProgram) -> list[Any]:
    loaded = torch.export.load(io.BytesIO(archive))
    return pytree.tree_leaves(loaded.module()(*program.args, **program.kwargs))


def assert_same_digest_and_outputs(program: ZooProgram, route: str, folder: Path) -> None:
    original = archive_bytes(program.ep)
    again = ROUND_TRIPS[route](original, folder)
    assert digests(again) == digests(original)
    # twice round: a fixed point, not a coincidence of the first pass
    assert digests(ROUND_TRIPS[route](again, folder)) == digests(original)
    expected, got = outputs(original, program), outputs(again, program)
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


@pytest.mark.parametrize("route", ROUND_TRIPS)
@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_zoo_digest_survives_round_trip(
    zoo: dict[str, ZooProgram], name: str, route: str, tmp_path: Path
) -> None:
    assert_same_digest_and_outputs(zoo[name], route, tmp_path)


@pytest.mark.parametrize("route", ROUND_TRIPS)
@pytest.mark.parametrize("name", REAL)
def test_real_digest_survives_round_trip(name: str, route: str, tmp_path: Path) -> None:
    from tests.realzoo import build_real_program

    assert_same_digest_and_outputs(build_real_program(name), route, tmp_path)


def test_stable_form_is_torch_canonical_form_with_offsets_settled(
    zoo_json: dict[str, bytes],
) -> None:
    """Only what torch's load + save drops differs from torch's own canonical form."""
    wire = zoo_json["multi_out"]
    canonical = json.loads(canonical_bytes(canonicalize(schema.load(wire))))
    stable = json.loads(canonical_bytes(stable_form(schema.load(wire))))
    assert canonical["torch_version"] == torch.__version__
    assert stable.pop("torch_version") == ""
    canonical.pop("torch_version")
    graph = canonical["graph_module"]["graph"]
    offsets = {k: v["storage_offset"] for k, v in graph["tensor_values"].items()}
    assert any(o != {"as_int": 0} for o in offsets.values())
    for meta in graph["tensor_values"].values():
        meta["storage_offset"] = {"as_int": 0}
    for node in graph["nodes"]:
        node["name"] = None
    assert stable == canonical


# ---------------------------------------------------------------- real differences


class Net(torch.nn.Module):
    def __init__(self, op: Callable[[torch.Tensor], torch.Tensor] = torch.relu) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(self.linear(x))


def _program(module: torch.nn.Module, x: torch.Tensor) -> bytes:
    return archive_bytes(torch.export.export(module, (x,), strict=False))


def test_real_differences_change_the_digest() -> None:
    torch.manual_seed(0)
    base = Net()
    x = torch.randn(2, 4)
    reference = digests(_program(base, x))

    weight = Net()
    weight.load_state_dict(base.state_dict())
    with torch.no_grad():
        weight.linear.weight[0, 0] += 1.0
    op = Net(torch.tanh)
    op.load_state_dict(base.state_dict())
    changed = {
        "weight": digests(_program(weight, x)),
        "op": digests(_program(op, x)),
        "shape": digests(_program(base, torch.randn(5, 4))),
    }
    assert changed["weight"].graph == reference.graph
    assert changed["weight"].weights != reference.weights
    assert changed["op"].graph != reference.graph
    assert changed["op"].weights == reference.weights
    assert changed["shape"].graph != reference.graph
    programs = {reference.program, *(d.program for d in changed.values())}
    assert len(programs) == 4


def test_a_stride_still_changes_the_graph_digest(zoo_json: dict[str, bytes]) -> None:
    data = json.loads(zoo_json["conv"])
    values = data["graph_module"]["graph"]["tensor_values"]
    name, meta = next((k, v) for k, v in values.items() if len(v["strides"]) == 4)
    meta["strides"] = list(reversed(meta["strides"]))
    changed = schema.load(json.dumps(data).encode())
    assert graph_digest(stable_form(changed)) != graph_digest(
        stable_form(schema.load(zoo_json["conv"]))
    ), name


# ---------------------------------------------------------------- diff agrees with the digest


def test_diff_identical_means_the_same_digest(zoo_json: dict[str, bytes]) -> None:
    """A change no part of the diff looks at (an intermediate value's stride) is not called
    identical; a torch round trip is."""
    wire = zoo_json["conv"]
    data = json.loads(wire)
    graph = data["graph_module"]["graph"]
    output = graph["nodes"][-1]["outputs"][0]["as_tensor"]["name"]
    inner = next(
        k for k, v in graph["tensor_values"].items() if len(v["strides"]) == 4 and k != output
    )
    graph["tensor_values"][inner]["strides"] = list(
        reversed(graph["tensor_values"][inner]["strides"])
    )
    old, new = schema.load(wire), schema.load(json.dumps(data).encode())
    diff = diff_programs(old, new)
    assert graph_digest(stable_form(old)) != graph_digest(stable_form(new))
    assert diff.summary.verdict != "identical"
    assert [f.field for f in diff.fields] == ["graph_digest"]

    offsets = json.loads(zoo_json["multi_out"])
    for meta in offsets["graph_module"]["graph"]["tensor_values"].values():
        meta["storage_offset"] = {"as_int": 0}
    same = diff_programs(
        schema.load(zoo_json["multi_out"]), schema.load(json.dumps(offsets).encode())
    )
    assert same.summary.verdict == "identical"


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_canonical_bytes_are_torchs_canonical_form_settled(
    zoo: dict[str, ZooProgram], zoo_json: dict[str, bytes], name: str
) -> None:
    with ops.open_source(archive_bytes(zoo[name].ep), "zip", SETTINGS) as source:
        data = ops.canonical(source, SETTINGS).data
    assert json.loads(data) == torch_stable(zoo_json[name])
