"""Real programs: torch's JSON -> schema.load -> schema.dump is torch's JSON, and torch reads it."""

from __future__ import annotations

import math
import subprocess
import sys

import orjson
import pytest
from torch._export.serde.serialize import SerializedArtifact, deserialize, serialize

import schema
from tests.zoo import PROGRAM_NAMES, ZooProgram, outputs_close


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_dump_equals_torch_json(name: str, zoo_json: dict[str, bytes]) -> None:
    doc = schema.load(zoo_json[name])
    ours = orjson.loads(schema.dump(doc))
    theirs = orjson.loads(zoo_json[name])
    assert ours == theirs
    # same parsed objects and the same key order everywhere
    assert orjson.dumps(ours) == orjson.dumps(theirs)
    assert schema.unknown_fields(doc) == []


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_torch_deserializes_our_bytes(name: str, zoo: dict[str, ZooProgram]) -> None:
    program = zoo[name]
    artifact = serialize(program.ep)
    ours = schema.dump(schema.load(artifact.exported_program))
    rebuilt = deserialize(
        SerializedArtifact(ours, artifact.state_dict, artifact.constants, artifact.example_inputs)
    )
    got = rebuilt.module()(*program.args, **program.kwargs)
    assert outputs_close(got, program.run())


def test_nonfinite_floats_round_trip(zoo_json: dict[str, bytes]) -> None:
    raw = zoo_json["scalar_floats"]
    assert b'"-Infinity"' in raw
    doc = schema.load(raw)
    floats = [
        i.arg.value
        for n in doc.graph_module.graph.nodes
        for i in n.inputs
        if isinstance(i.arg, schema.ArgumentAsFloat)
    ]
    assert -math.inf in floats
    assert b'"-Infinity"' in schema.dump(doc)


def test_unknown_keys_are_kept_and_listed(zoo_json: dict[str, bytes]) -> None:
    raw = orjson.loads(zoo_json["dynamic"])
    raw["future_top"] = {"nested": [1, 2]}
    first_meta = next(iter(raw["graph_module"]["graph"]["tensor_values"]))
    raw["graph_module"]["graph"]["tensor_values"][first_meta]["future_flag"] = True
    raw["graph_module"]["graph"]["nodes"][0]["inputs"][0]["future/x"] = "y"
    read = schema.read(orjson.dumps(raw))
    expected = [
        "/graph_module/graph/nodes/0/inputs/0/future~1x",
        f"/graph_module/graph/tensor_values/{first_meta}/future_flag",
        "/future_top",
    ]
    # what the read found equals a walk over the models it built
    assert read.unknown_fields == schema.unknown_fields(read.document) == expected
    assert orjson.loads(schema.dump(read.document)) == raw


def test_unknown_keys_in_a_union_arm_are_still_errors(zoo_json: dict[str, bytes]) -> None:
    raw = orjson.loads(zoo_json["dynamic"])
    raw["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"]["future_arm"] = 1
    with pytest.raises(schema.DocumentInvalid) as info:
        schema.read(orjson.dumps(raw))
    assert [(i.code, i.path) for i in info.value.issues] == [
        ("union-many-arms", "/graph_module/graph/nodes/0/inputs/0/arg")
    ]


def test_older_document_gets_defaults(zoo_json: dict[str, bytes]) -> None:
    raw = orjson.loads(zoo_json["conv"])
    for key in ("verifiers", "torch_version", "guards_code"):
        del raw[key]
    for node in raw["graph_module"]["graph"]["nodes"]:
        del node["name"]
    read = schema.read(orjson.dumps(raw))
    assert (read.filled, read.unknown_fields) == (
        [
            "ExportedProgram.guards_code",
            "ExportedProgram.torch_version",
            "ExportedProgram.verifiers",
            "Node.name",
        ],
        [],
    )
    dumped = orjson.loads(schema.dump(read.document))
    assert dumped["guards_code"] == []
    assert dumped["torch_version"] == "<=2.4"
    assert all(n["name"] is None for n in dumped["graph_module"]["graph"]["nodes"])


def test_import_schema_loads_neither_torch_nor_fastapi() -> None:
    code = (
        "import sys, schema; schema.describe('8.20'); schema.json_schema('8.2');"
        "print(sorted(m for m in ('torch', 'fastapi', 'app') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
