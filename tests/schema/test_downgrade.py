"""schema.downgrade: documents for an older 8.x reader, checked against torch's own schema.yaml of
each release (every key, arm and enum value the output holds is one that release declares), and
refused with the rule and the pointer where the older schema cannot say what the document says."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import orjson
import pytest

import schema
from schema._tree import places
from tests.zoo import PROGRAM_NAMES

#: The module (`schema.downgrade` is the function).
downgrading = importlib.import_module("schema.downgrade")
#: One torch release per describable 8.x version, whose schema.yaml is the oracle.
RELEASE_OF = {v.version: v.torch_releases[-1] for v in schema.versions() if v.describable}


def _torch_description(
    history_dir: Path, version: tuple[int, int]
) -> schema.description.Description:
    text = (history_dir / f"torch-{RELEASE_OF[version]}.schema.yaml").read_text()
    return schema.load_description(text)


def _foreign(tree: Any, description: dict[str, Any]) -> list[str]:
    """Every key, arm or enum value of `tree` that `description` (torch's) does not declare."""
    found = []
    for place in places(tree, description, "ExportedProgram"):
        spec = description.get(place.type.name)
        value = place.value
        if not isinstance(spec, dict):
            continue
        where = schema.errors.pointer(list(place.path))
        if spec["kind"] == "struct" and isinstance(value, dict):
            found += [f"{where}/{k}" for k in value if k not in spec["fields"]]
        elif spec["kind"] == "union" and isinstance(value, dict):
            found += [f"{where}/{k}" for k in value if k not in spec["fields"]]
        elif spec["kind"] == "enum" and value not in spec["fields"].values():
            found.append(f"{where}={value}")
    return found


def _unnamed(raw: bytes) -> schema.ExportedProgram:
    """A zoo document with every node's name cleared (as torch wrote them before 8.17)."""
    tree = orjson.loads(raw)
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if {"target", "inputs", "outputs"} <= item.keys():
                item["name"] = None
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return schema.load(orjson.dumps(tree))


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_every_written_key_is_one_torchs_release_declares(
    name: str, zoo_json: dict[str, bytes], history_dir: Path
) -> None:
    doc = _unnamed(zoo_json[name])
    written = 0
    refusals: list[schema.Issue] = []
    for version in RELEASE_OF:
        try:
            out = schema.downgrade(doc, version)
        except schema.DowngradeRefused as refused:
            refusals += refused.issues or [schema.Issue("none", "", str(version))]
            continue
        written += 1
        assert out.tree["schema_version"] == {"major": version[0], "minor": version[1]}
        assert _foreign(out.tree, _torch_description(history_dir, version)) == [], version
        # what was dropped was at its default: reading it back as ours gives the document again
        back = schema.upgrade(out.dump())
        assert orjson.loads(schema.dump(back.document)) == orjson.loads(schema.dump(doc))
    # only what a version lacks is refused, each at a place the document holds it
    assert all(i.code.endswith("-not-in-version") and i.path for i in refusals)
    # 8.17 and 8.20 always; the older ones as the program allows
    assert written >= 2


def test_the_current_version_writes_the_document_as_it_is(zoo_json: dict[str, bytes]) -> None:
    for name in PROGRAM_NAMES:
        doc: schema.ExportedProgram = schema.load(zoo_json[name])
        out = schema.downgrade(doc, "8.20")
        assert (out.version, out.dropped) == ("8.20", [])
        assert out.tree == orjson.loads(schema.dump(doc))


def test_fields_at_their_default_are_dropped(zoo_json: dict[str, bytes]) -> None:
    out = schema.downgrade(_unnamed(zoo_json["conv"]), "8.14")
    assert out.dropped == ["Node.name"]
    assert all("name" not in node for node in out.tree["graph_module"]["graph"]["nodes"])
    out = schema.downgrade(_unnamed(zoo_json["conv"]), "8.7")
    assert out.dropped == ["ExportedProgram.guards_code", "Node.name"]
    assert "guards_code" not in out.tree


def test_a_field_holding_a_value_is_refused_at_its_pointer(zoo_json: dict[str, bytes]) -> None:
    doc: schema.ExportedProgram = schema.load(zoo_json["conv"])
    with pytest.raises(schema.DowngradeRefused) as refused:
        schema.downgrade(doc, "8.15")
    assert [(i.code, i.path) for i in refused.value.issues] == [
        ("field-not-in-version", "/graph_module/graph/nodes/0/name")
    ]
    assert refused.value.code == "downgrade-refused"
    assert "Node.name is new in schema 8.17; schema 8.15 has no such field" in str(refused.value)


def test_a_derived_field_the_reader_works_out_is_dropped(zoo_json: dict[str, bytes]) -> None:
    doc: schema.ExportedProgram = schema.load(zoo_json["conv"])
    out = schema.downgrade(doc, "8.15", {"Node.name": lambda node: True})
    assert out.dropped == ["Node.name"]
    first = doc.graph_module.graph.nodes[0].name
    with pytest.raises(schema.DowngradeRefused) as refused:
        schema.downgrade(doc, "8.15", {"Node.name": lambda node: node["name"] != first})
    assert [(i.code, i.path) for i in refused.value.issues] == [
        ("field-not-in-version", "/graph_module/graph/nodes/0/name")
    ]


def _with(raw: bytes, change: Any) -> schema.ExportedProgram:
    tree = orjson.loads(raw)
    change(tree)
    return schema.load(orjson.dumps(tree))


def test_an_arm_the_version_lacks_is_refused(zoo_json: dict[str, bytes]) -> None:
    def add(tree: dict[str, Any]) -> None:
        tree["graph_module"]["graph"]["nodes"][0]["inputs"].append(
            {"name": "z", "arg": {"as_float_lists": [[1.5]]}, "kind": 1}
        )

    doc = _with(zoo_json["conv"], add)
    inputs = len(doc.graph_module.graph.nodes[0].inputs)
    assert schema.downgrade(doc, "8.20").version == "8.20"
    with pytest.raises(schema.DowngradeRefused) as refused:
        schema.downgrade(doc, "8.17")
    assert [(i.code, i.path) for i in refused.value.issues] == [
        (
            "arm-not-in-version",
            f"/graph_module/graph/nodes/0/inputs/{inputs - 1}/arg/as_float_lists",
        )
    ]


def test_an_enum_value_the_version_lacks_is_refused(zoo_json: dict[str, bytes]) -> None:
    def retype(tree: dict[str, Any]) -> None:
        values = tree["graph_module"]["graph"]["tensor_values"]
        values[next(iter(values))]["dtype"] = int(schema.ScalarType.UINT64)

    doc = _with(zoo_json["conv"], retype)
    first = next(iter(doc.graph_module.graph.tensor_values))
    with pytest.raises(schema.DowngradeRefused) as refused:
        schema.downgrade(doc, "8.17")
    assert [(i.code, i.path) for i in refused.value.issues] == [
        ("enum-value-not-in-version", f"/graph_module/graph/tensor_values/{first}/dtype")
    ]


def test_a_key_our_schema_does_not_declare_is_refused(zoo_json: dict[str, bytes]) -> None:
    doc = _with(zoo_json["conv"], lambda tree: tree.update(future_field=1))
    with pytest.raises(schema.DowngradeRefused) as refused:
        schema.downgrade(doc, "8.20")
    assert [(i.code, i.path) for i in refused.value.issues] == [("unknown-field", "/future_field")]


def test_a_schema_change_without_an_exact_downgrade_refuses_the_version(
    zoo_json: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _unnamed(zoo_json["conv"])
    downgrading._plan.cache_clear()
    monkeypatch.setattr(
        downgrading, "_HANDLED", downgrading._HANDLED - {"field-added-with-default"}
    )
    try:
        assert schema.downgrade(doc, "8.20").dropped == []
        with pytest.raises(schema.DowngradeRefused) as refused:
            schema.downgrade(doc, "8.15")
        assert {i.code for i in refused.value.issues} == {"schema-change-unsupported"}
    finally:
        downgrading._plan.cache_clear()


def test_unknown_versions_are_refused(zoo_json: dict[str, bytes]) -> None:
    doc: schema.ExportedProgram = schema.load(zoo_json["conv"])
    for version in ("8.99", "7.3", "nonsense"):
        with pytest.raises(schema.UnknownVersion):
            schema.downgrade(doc, version)


def test_the_archive_weights_config_needs_nothing_dropped_from_8_14() -> None:
    meta = {
        "dtype": 7,
        "sizes": [{"as_int": 2}],
        "requires_grad": False,
        "device": {"type": "cpu", "index": None},
        "strides": [{"as_int": 1}],
        "storage_offset": {"as_int": 0},
        "layout": 7,
    }
    entry = {"path_name": "weight_0", "is_param": True, "use_pickle": False, "tensor_meta": meta}
    config = schema.load(orjson.dumps({"config": {"w": entry}}), schema.PayloadConfig)
    for version in RELEASE_OF:
        if version >= (8, 14):
            out = schema.downgrade(config, version)
            assert out.tree == orjson.loads(schema.dump(config))
            assert out.dropped == []


def test_every_change_since_each_release_has_an_exact_downgrade(history_dir: Path) -> None:
    # torch's own files, not our models: a default changed, a field removed or retyped between a
    # release and 2.13 would need more than dropping keys
    current = _torch_description(history_dir, schema.CURRENT)
    for version in RELEASE_OF:
        changes = schema.diff(_torch_description(history_dir, version), current).changes
        assert {c.rule for c in changes} <= downgrading._HANDLED, version
        assert downgrading._plan(version).unsupported == []
