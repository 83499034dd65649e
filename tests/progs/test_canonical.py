"""Canonical form against torch's own canonicalize(), on the zoo and on perturbed zoo documents."""

from __future__ import annotations

import gc
import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._export.serde import schema as torch_schema
from torch._export.serde import serialize as torch_serde

import schema
from app.programs import canonical
from app.programs.canonical import CanonicalFailure, canonical_bytes, canonicalize, settle
from app.programs.digest import graph_digest
from schema import Issue
from tests.progs import twin_a, twin_b
from tests.zoo import PROGRAM_NAMES, torch_json

REPO_ROOT = Path(__file__).resolve().parents[2]
VALUE_MAPS = (
    "tensor_values",
    "sym_int_values",
    "sym_float_values",
    "sym_bool_values",
    "custom_obj_values",
)


def torch_canonical(wire: bytes, constants: set[str] | None = None) -> Any:
    """torch's canonical form of a document, as parsed JSON."""
    program = torch_serde._bytes_to_dataclass(torch_schema.ExportedProgram, wire)
    return json.loads(torch_serde._to_json_bytes(torch_serde.canonicalize(program, constants)))


def torch_stable(wire: bytes) -> Any:
    """torch's canonical form of a document with what torch's load + save drops settled: what
    `app.operations.canonical` must give (the form the graph digest names)."""
    program = torch_serde._bytes_to_dataclass(torch_schema.ExportedProgram, wire)
    canonical = torch_serde._to_json_bytes(torch_serde.canonicalize(program))
    return json.loads(canonical_bytes(settle(schema.load(canonical))))


def our_canonical(wire: bytes, constants: set[str] | None = None) -> Any:
    """Our canonical form of a document, as parsed JSON."""
    return json.loads(canonical_bytes(canonicalize(schema.load(wire), constants=constants or ())))


# ---------------------------------------------------------------- perturbations


def _value_names(data: Any, found: set[str]) -> set[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in VALUE_MAPS:
                found.update(value)
            _value_names(value, found)
    elif isinstance(data, list):
        for item in data:
            _value_names(item, found)
    return found


def _renamed(data: Any, mapping: dict[str, str]) -> Any:
    if isinstance(data, list):
        return [_renamed(item, mapping) for item in data]
    if not isinstance(data, dict):
        return data
    # A NamedArgument's "name" is the operator's parameter name, not a value; node names and
    # module call signatures are kept by canonicalize, so they keep their names here too.
    keep_name = "target" in data or ("arg" in data and "name" in data)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in VALUE_MAPS:
            out[key] = {mapping.get(k, k): _renamed(v, mapping) for k, v in value.items()}
        elif key in ("name", "as_name", "user_input_name") and isinstance(value, str):
            out[key] = value if keep_name and key == "name" else mapping.get(value, value)
        elif key == "module_call_graph":
            out[key] = value
        else:
            out[key] = _renamed(value, mapping)
    return out


def _shuffle_nodes(data: Any, rng: random.Random) -> None:
    if isinstance(data, dict):
        if "nodes" in data and "tensor_values" in data:
            rng.shuffle(data["nodes"])
        for value in data.values():
            _shuffle_nodes(value, rng)
    elif isinstance(data, list):
        for item in data:
            _shuffle_nodes(item, rng)


def _shuffle_pairs(args: list[Any], specs: list[Any], rng: random.Random) -> None:
    pairs = list(zip(args, specs, strict=True))
    rng.shuffle(pairs)
    args[:] = [a for a, _ in pairs]
    specs[:] = [s for _, s in pairs]


def perturbed(wire: bytes, seed: int, prefix: str) -> bytes:
    """The same program with nodes, inputs and outputs shuffled and its values renamed.

    The seed alone decides the shuffles and which value gets which number; `prefix` only
    spells the new names, so "_" (names colliding with canonical ones) and "v" give the same
    program under two spellings.
    """
    rng = random.Random(seed)
    data = json.loads(wire)
    names = sorted(_value_names(data, set()))
    targets = [f"{prefix}{i}" for i in range(len(names))]
    rng.shuffle(targets)
    data = _renamed(data, dict(zip(names, targets, strict=True)))
    _shuffle_nodes(data, rng)
    gm = data["graph_module"]
    _shuffle_pairs(gm["graph"]["inputs"], gm["signature"]["input_specs"], rng)
    _shuffle_pairs(gm["graph"]["outputs"], gm["signature"]["output_specs"], rng)
    return json.dumps(data).encode()


# ---------------------------------------------------------------- parity with torch


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_matches_torch(zoo_json: dict[str, bytes], name: str) -> None:
    assert our_canonical(zoo_json[name]) == torch_canonical(zoo_json[name])


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_matches_torch_on_perturbed_documents(zoo_json: dict[str, bytes], name: str) -> None:
    for seed in range(5):
        wire = perturbed(zoo_json[name], seed, "v")
        assert our_canonical(wire) == torch_canonical(wire), seed


class Ties(torch.nn.Module):
    """Many nodes with one target and one set of input names: only ranks and positions differ."""

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return (
            c + 1,
            b + 1,
            a + 1,
            a + 1,
            a * b,
            b * a,
            torch.cat([c, a]),
            torch.cat([a, c, b]),
            torch.cat([a, c]),
            (a + 1) * (c + 1),
        )


@pytest.fixture(scope="module")
def ties_json() -> bytes:
    """torch's JSON of the Ties program."""
    args = (torch.randn(2), torch.randn(2), torch.randn(2))
    return torch_json(torch.export.export(Ties(), args, strict=False))


def test_tie_breaks_match_torch(ties_json: bytes) -> None:
    for seed in range(8):
        wire = perturbed(ties_json, seed, "v")
        assert our_canonical(wire) == torch_canonical(wire), seed


def test_tie_breaks_with_constants_match_torch(ties_json: bytes) -> None:
    for seed in range(6):
        wire = perturbed(ties_json, seed, "v")
        # Marking the last user input constant gives its uses rank -1 instead of the highest
        # input rank, which reorders the ties.
        last = json.loads(wire)["graph_module"]["graph"]["inputs"][-1]["as_tensor"]["name"]
        constants = {last}
        assert our_canonical(wire, constants) == torch_canonical(wire, constants), seed


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_names_colliding_with_canonical_ones(zoo_json: dict[str, bytes], name: str) -> None:
    # torch renames its value maps in place and loses entries here; we give what torch gives
    # for the same program spelled without collisions.
    for seed in range(3):
        colliding = perturbed(zoo_json[name], seed, "_")
        assert our_canonical(colliding) == torch_canonical(perturbed(zoo_json[name], seed, "v"))


def test_torch_loses_value_meta_on_colliding_names(zoo_json: dict[str, bytes]) -> None:
    colliding = perturbed(zoo_json["conv"], 0, "_")
    ours = our_canonical(colliding)["graph_module"]["graph"]["tensor_values"]
    theirs = torch_canonical(colliding)["graph_module"]["graph"]["tensor_values"]
    assert len(ours) == len(json.loads(zoo_json["conv"])["graph_module"]["graph"]["tensor_values"])
    assert len(theirs) < len(ours)


def test_perturbation_changes_the_document_but_not_its_canonical_form(
    zoo_json: dict[str, bytes],
) -> None:
    wire = perturbed(zoo_json["conv"], 1, "v")
    assert wire != zoo_json["conv"]
    assert our_canonical(wire) == our_canonical(zoo_json["conv"])


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_constants_match_torch(zoo_json: dict[str, bytes], name: str) -> None:
    specs = json.loads(zoo_json[name])["graph_module"]["signature"]["input_specs"]
    # Lifted parameters, buffers and constants: values torch lets callers mark as constants.
    lifted = ("parameter", "buffer", "tensor_constant")
    constants = {spec[kind]["arg"]["name"] for spec in specs for kind in lifted if kind in spec}
    assert our_canonical(zoo_json[name], constants) == torch_canonical(zoo_json[name], constants)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_idempotent(zoo_json: dict[str, bytes], name: str) -> None:
    once = canonicalize(schema.load(perturbed(zoo_json[name], 7, "_")))
    twice = canonicalize(once)
    assert twice == once
    assert canonical_bytes(twice) == canonical_bytes(once)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_canonical_bytes_load_back_to_the_same_form(zoo_json: dict[str, bytes], name: str) -> None:
    first = canonical_bytes(canonicalize(schema.load(zoo_json[name])))
    assert canonical_bytes(canonicalize(schema.load(first))) == first


def test_input_is_not_mutated(zoo_json: dict[str, bytes]) -> None:
    for name in ("cond", "linear_bn_train", "pytree"):
        doc: schema.ExportedProgram = schema.load(zoo_json[name])
        before = schema.dump(doc)
        canonicalize(doc)
        assert schema.dump(doc) == before


def test_drops_unstable_metadata(zoo_json: dict[str, bytes]) -> None:
    doc = canonicalize(schema.load(zoo_json["preserve_sig"]))
    assert all(node.metadata == {} for node in doc.graph_module.graph.nodes)
    assert doc.graph_module.metadata == {}
    names = list(doc.graph_module.graph.tensor_values)
    assert names == sorted(names)
    assert set(names) == {f"_{i}" for i in range(len(names))}


def test_canonicalize_pauses_gc_and_restores_it(zoo_json: dict[str, bytes]) -> None:
    doc: schema.ExportedProgram = schema.load(zoo_json["conv"])
    assert gc.isenabled()
    canonicalize(doc)
    canonical_bytes(doc)
    assert gc.isenabled()
    gc.disable()
    try:
        canonicalize(doc)
        assert not gc.isenabled()
    finally:
        gc.enable()


# ---------------------------------------------------------------- broken documents

Mutation = Callable[[dict[str, Any]], None]
GRAPH = "/graph_module/graph"


def _nodes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = doc["graph_module"]["graph"]["nodes"]
    return nodes


def _set_output(i: int, name: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        _nodes(doc)[i]["outputs"][0]["as_tensor"]["name"] = name

    return mutate


def _set_input(i: int, j: int, name: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        _nodes(doc)[i]["inputs"][j]["arg"]["as_tensor"]["name"] = name

    return mutate


def _drop_meta(doc: dict[str, Any]) -> None:
    del doc["graph_module"]["graph"]["tensor_values"]["relu"]


def _drop_input_spec(doc: dict[str, Any]) -> None:
    doc["graph_module"]["signature"]["input_specs"].pop()


def _ghost_parameter(doc: dict[str, Any]) -> None:
    doc["graph_module"]["signature"]["input_specs"][2]["parameter"]["arg"]["name"] = "ghost"


def _ghost_user_output(doc: dict[str, Any]) -> None:
    spec = doc["graph_module"]["signature"]["output_specs"][0]
    spec["user_output"]["arg"]["as_tensor"]["name"] = "ghost"


def _twin_input(doc: dict[str, Any]) -> None:
    doc["graph_module"]["graph"]["inputs"][4]["as_tensor"]["name"] = "p_conv_weight"


def _ghost_in_subgraph(doc: dict[str, Any]) -> None:
    sub = _nodes(doc)[2]["inputs"][2]["arg"]["as_graph"]["graph"]
    sub["nodes"][1]["inputs"][0]["arg"]["as_tensor"]["name"] = "ghost"


CYCLE = "is on a dependency cycle or after one"
BROKEN: list[tuple[str, str, Mutation, str, list[Issue]]] = [
    (
        "duplicate_output",
        "conv",
        _set_output(1, "conv2d"),
        "duplicate-value",
        [Issue("duplicate-value", f"{GRAPH}/nodes/1/outputs/0", "value 'conv2d' is defined twice")],
    ),
    (
        "duplicate_input",
        "conv",
        _twin_input,
        "duplicate-value",
        [
            Issue(
                "duplicate-value",
                f"{GRAPH}/inputs/4",
                "graph input 'p_conv_weight' is defined twice",
            )
        ],
    ),
    (
        "undefined",
        "conv",
        _set_input(3, 0, "ghost"),
        "undefined-value",
        [
            Issue(
                "undefined-value",
                f"{GRAPH}/nodes/3/inputs/0/arg",
                "value 'ghost' is used but never defined",
            )
        ],
    ),
    (
        "undefined_in_subgraph",
        "cond",
        _ghost_in_subgraph,
        "undefined-value",
        [
            Issue(
                "undefined-value",
                f"{GRAPH}/nodes/2/inputs/2/arg/as_graph/graph/nodes/1/inputs/0/arg",
                "value 'ghost' is used but never defined",
            )
        ],
    ),
    (
        "cycle",
        "conv",
        _set_input(0, 0, "relu"),
        "graph-cycle",
        [
            Issue("graph-cycle", f"{GRAPH}/nodes/{i}", f"node {target!r} {CYCLE}")
            for i, target in enumerate(
                [
                    "torch.ops.aten.conv2d.default",
                    "torch.ops.aten.relu.default",
                    "torch.ops.aten.max_pool2d.default",
                    "torch.ops.aten.flatten.using_ints",
                    "torch.ops.aten.linear.default",
                ]
            )
        ],
    ),
    (
        "missing_meta",
        "conv",
        _drop_meta,
        "missing-value-meta",
        [
            Issue(
                "missing-value-meta",
                f"{GRAPH}/nodes/1/outputs/0",
                "'relu' has no entry in tensor_values",
            )
        ],
    ),
    (
        "signature_mismatch",
        "conv",
        _drop_input_spec,
        "signature-mismatch",
        [
            Issue(
                "signature-mismatch",
                "/graph_module/signature/input_specs",
                "the graph has 5 inputs but the signature 4 input_specs",
            )
        ],
    ),
    (
        "unknown_parameter",
        "conv",
        _ghost_parameter,
        "unknown-spec-value",
        [
            Issue(
                "unknown-spec-value",
                "/graph_module/signature/input_specs/2/parameter/arg/name",
                "'ghost' is not a graph input or node output",
            )
        ],
    ),
    (
        "unknown_user_output",
        "conv",
        _ghost_user_output,
        "unknown-spec-value",
        [
            Issue(
                "unknown-spec-value",
                "/graph_module/signature/output_specs/0/user_output/arg",
                "'ghost' is not a graph input or node output",
            )
        ],
    ),
]


@pytest.mark.parametrize(
    ("program", "mutate", "code", "issues"),
    [case[1:] for case in BROKEN],
    ids=[case[0] for case in BROKEN],
)
def test_broken_documents_fail_with_paths(
    zoo_json: dict[str, bytes], program: str, mutate: Mutation, code: str, issues: list[Issue]
) -> None:
    data = json.loads(zoo_json[program])
    mutate(data)
    doc: schema.ExportedProgram = schema.load(json.dumps(data))
    with pytest.raises(CanonicalFailure) as info:
        canonicalize(doc)
    assert info.value.code == code
    assert info.value.issues == issues


# ---------------------------------------------------------------- canonical bytes


def _conv_with(zoo_json: dict[str, bytes], mutate: Mutation) -> schema.ExportedProgram:
    data = json.loads(zoo_json["conv"])
    mutate(data)
    return schema.load(json.dumps(data))


def test_bytes_are_sorted_compact_utf8(zoo_json: dict[str, bytes]) -> None:
    def rename_node(doc: dict[str, Any]) -> None:
        _nodes(doc)[1]["name"] = "rélu_ü"

    out = canonical_bytes(canonicalize(_conv_with(zoo_json, rename_node)))
    # conv holds no floats, so the standard library writes exactly the same canonical text.
    expected = json.dumps(
        json.loads(out), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    assert out == expected
    assert "rélu_ü".encode() in out
    assert b'"dtype":7' in out


def test_bytes_write_torch_float_strings_and_keep_floats(zoo_json: dict[str, bytes]) -> None:
    out = canonical_bytes(canonicalize(schema.load(zoo_json["scalar_floats"])))
    assert b'"as_float":"-Infinity"' in out
    assert b'"as_float":"Infinity"' in out

    def one_point_zero(doc: dict[str, Any]) -> None:
        _nodes(doc)[3]["inputs"][1]["arg"] = {"as_float": 1.0}

    assert b'{"as_float":1.0}' in canonical_bytes(_conv_with(zoo_json, one_point_zero))


def test_bytes_slow_path_matches_fast_path(
    zoo_json: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [canonicalize(schema.load(zoo_json[name])) for name in PROGRAM_NAMES]
    fast = [canonical_bytes(doc) for doc in docs]
    monkeypatch.setattr(canonical, "_orjson_exact", lambda wire: False)
    assert [canonical_bytes(doc) for doc in docs] == fast


@pytest.mark.parametrize("bound", [-(2**63), 2**63 - 1, 2**64 - 1])
def test_bytes_64_bit_bounds_take_the_fast_path(
    bound: int, zoo_json: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def at_bound(doc: dict[str, Any]) -> None:
        _nodes(doc)[3]["inputs"][1]["arg"] = {"as_int": bound}

    doc = _conv_with(zoo_json, at_bound)

    def slow(value: Any) -> Any:
        raise AssertionError("the slow path was taken")

    monkeypatch.setattr(canonical, "_wire_floats", slow)
    assert f'{{"as_int":{bound}}}'.encode() in canonical_bytes(doc)


def test_bytes_keep_64_bit_integers_exact(zoo_json: dict[str, bytes]) -> None:
    def huge(doc: dict[str, Any]) -> None:
        _nodes(doc)[3]["inputs"][1]["arg"] = {"as_int": 2**64 - 1}

    out = canonical_bytes(_conv_with(zoo_json, huge))
    assert b'{"as_int":18446744073709551615}' in out


@pytest.mark.parametrize("number", [2**70, 2**64, -(2**63) - 1])
def test_bytes_reject_integers_beyond_64_bits(number: int, zoo_json: dict[str, bytes]) -> None:
    def too_big(doc: dict[str, Any]) -> None:
        _nodes(doc)[3]["inputs"][1]["arg"] = {"as_int": number}

    with pytest.raises(CanonicalFailure) as info:
        canonical_bytes(_conv_with(zoo_json, too_big))
    assert info.value.code == "integer-out-of-range"


# ---------------------------------------------------------------- stable digests


def _twin_digest(module: type[torch.nn.Module]) -> tuple[str, bytes]:
    torch.manual_seed(0)
    ep = torch.export.export(module(), (torch.randn(2, 4),), strict=False)
    wire = torch_json(ep)
    return graph_digest(canonicalize(schema.load(wire))), wire


def test_graph_digest_ignores_the_source_file() -> None:
    digest_a, wire_a = _twin_digest(twin_a.Twin)
    digest_b, wire_b = _twin_digest(twin_b.Twin)
    # The raw documents differ (stack traces name other files and lines); the digests do not.
    assert b"twin_a.py" in wire_a
    assert b"twin_b.py" in wire_b
    assert digest_a == digest_b


def test_graph_digest_is_the_same_in_another_process() -> None:
    script = """
import torch
import schema
from app.programs.canonical import canonicalize
from app.programs.digest import graph_digest
from tests.zoo import torch_json
from tests.progs.twin_b import Twin
torch.manual_seed(0)
ep = torch.export.export(Twin(), (torch.randn(2, 4),), strict=False)
print(graph_digest(canonicalize(schema.load(torch_json(ep)))))
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == _twin_digest(twin_a.Twin)[0]


def test_graph_digests_tell_programs_apart(zoo_json: dict[str, bytes]) -> None:
    digests = {graph_digest(canonicalize(schema.load(zoo_json[n]))) for n in PROGRAM_NAMES}
    assert len(digests) == len(PROGRAM_NAMES)
