"""Schema diffs and verdicts against torch's released schema.yaml files and synthetic pairs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

import schema
from schema.diff import RULES, check_description
from tests.schema.changes import Change, change_key, changes_of, expected_changes, types_of

Releases = list[tuple[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def releases(history_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every release's parsed schema.yaml, oldest first (parsed once: PyYAML is slow)."""
    files = sorted(
        history_dir.glob("torch-*.schema.yaml"),
        key=lambda p: tuple(int(x) for x in p.name[6:-12].split(".")),
    )
    return [(p.name[6:-12], yaml.load(p.read_text(), Loader=yaml.CSafeLoader)) for p in files]


def _file(releases: Releases, release: str) -> dict[str, Any]:
    return copy.deepcopy(dict(releases)[release])


def test_every_consecutive_release_pair(releases: Releases) -> None:
    assert len(releases) == 20
    nonempty = 0
    for (ra, a), (rb, b) in zip(releases, releases[1:], strict=False):
        d = schema.diff(a, b)
        assert changes_of(d) == expected_changes(a, b), f"{ra} -> {rb}"
        assert (d.old_version, d.new_version) == (
            schema.format_version(tuple(a["SCHEMA_VERSION"])),
            schema.format_version(tuple(b["SCHEMA_VERSION"])),
        )
        for c in d.changes:
            rule = RULES[c.rule]
            assert (c.breaks_forward, c.breaks_backward, c.bump) == rule[1:], c
        nonempty += bool(d.changes)
    assert nonempty == 9


def test_release_pairs_known_facts(releases: Releases) -> None:
    files = dict(releases)
    d = schema.diff(files["2.5.1"], files["2.6.0"])
    assert [c.message for c in d.changes if c.rule in ("type-removed", "field-order-changed")] == [
        "ConstantInputSpec: type-removed (struct -> -)",
        "SymExprHint: field-order-changed (as_int, as_float, as_bool -> as_int, as_bool, as_float)",
    ]
    assert sorted(c.path for c in d.changes if c.rule == "field-type-changed") == [
        "Argument.as_none",
        "ConstantValue.as_none",
        "InputSpec.constant_input",
        "OptionalTensorArgument.as_none",
        "RangeConstraint.max_val",
        "RangeConstraint.min_val",
    ]
    assert schema.diff(files["2.12.0"], files["2.15.0"]).changes == []


def test_described_versions_equal_the_files(releases: Releases) -> None:
    """diff of two known versions (by name, with field ids) equals diff of torch's files."""
    by_version = {tuple(d["SCHEMA_VERSION"]): d for _, d in releases}
    known = [v.version for v in schema.versions() if v.describable]
    for a, b in zip(known, known[1:], strict=False):
        ours = schema.diff(schema.format_version(a), schema.format_version(b))
        assert changes_of(ours) == changes_of(schema.diff(by_version[a], by_version[b])), (a, b)


def test_diff_8_2_to_8_20_composes_the_steps() -> None:
    known = [schema.format_version(v.version) for v in schema.versions() if v.describable]
    steps: set[Change] = set()
    for a, b in zip(known, known[1:], strict=False):
        steps |= changes_of(schema.diff(a, b))
    added = {k[1] for k in steps if k[0] == "type-added"}
    removed = {k[1] for k in steps if k[0] == "type-removed"}
    assert added & removed == {"Model", "Program"}
    composed = {k for k in steps if k[1] not in added & removed}
    whole = schema.diff("8.2", "8.20")
    assert changes_of(whole) == composed
    assert whole.required_bump == "minor"
    assert {c.rule for c in whole.changes} == {
        "type-added",
        "union-arm-added",
        "field-added-with-default",
        "enum-value-added",
    }


# ---------------------------------------------------------------- one synthetic pair per rule

BASE: dict[str, Any] = {
    "E": {"kind": "enum", "fields": {"A": 1, "B": 2}},
    "S": {
        "kind": "struct",
        "fields": {"a": {"type": "int"}, "b": {"type": "str", "default": "x"}},
    },
    "U": {"kind": "union", "fields": {"as_int": {"type": "int"}, "as_s": {"type": "S"}}},
    "SCHEMA_VERSION": [1, 1],
    "TREESPEC_VERSION": 1,
}
INT = {"type": "int"}


def _edit(fn: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    new = copy.deepcopy(BASE)
    fn(new)
    return new


def _with_ids(d: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(d)
    for name, field in [("a", 10), ("b", 20), ("c", 10)]:
        if name in out["S"]["fields"]:
            out["S"]["fields"][name]["id"] = field
    return out


def _remove_a_add_c(d: dict[str, Any]) -> None:
    del d["S"]["fields"]["a"]
    d["S"]["fields"]["c"] = {"type": "int"}


CASES: list[tuple[str, Callable[[dict[str, Any]], Any], list[Change]]] = [
    (
        "type-added",
        lambda d: d.update(T={"kind": "struct", "fields": {"x": INT}}),
        [change_key("type-added", "T", None, "struct")],
    ),
    ("type-removed", lambda d: d.pop("E"), [change_key("type-removed", "E", "enum", None)]),
    (
        "kind-changed",
        lambda d: d.update(E={"kind": "union", "fields": {"as_int": INT}}),
        [change_key("kind-changed", "E", "enum", "union")],
    ),
    (
        "field-added-with-default",
        lambda d: d["S"]["fields"].update(c={"type": "bool", "default": "False"}),
        [change_key("field-added-with-default", "S.c", None, {"type": "bool", "default": "False"})],
    ),
    (
        "field-added-required",
        lambda d: d["S"]["fields"].update(c={"type": "List[S]"}),
        [change_key("field-added-required", "S.c", None, {"type": "List[S]"})],
    ),
    (
        "field-removed",
        lambda d: d["S"]["fields"].pop("b"),
        [change_key("field-removed", "S.b", {"type": "str", "default": "x"}, None)],
    ),
    (
        "field-type-changed",
        lambda d: d["S"]["fields"]["a"].update(type="Optional[int]"),
        [change_key("field-type-changed", "S.a", "int", "Optional[int]")],
    ),
    (
        "default-changed",
        lambda d: d["S"]["fields"]["b"].update(default="y"),
        [change_key("default-changed", "S.b", "x", "y")],
    ),
    (
        "default-added",
        lambda d: d["S"]["fields"]["a"].update(default="0"),
        [change_key("default-added", "S.a", None, "0")],
    ),
    (
        "default-removed",
        lambda d: d["S"]["fields"]["b"].pop("default"),
        [change_key("default-removed", "S.b", "x", None)],
    ),
    (
        "union-arm-added",
        lambda d: d["U"]["fields"].update(as_e={"type": "E"}),
        [change_key("union-arm-added", "U.as_e", None, {"type": "E"})],
    ),
    (
        "union-arm-removed",
        lambda d: d["U"]["fields"].pop("as_s"),
        [change_key("union-arm-removed", "U.as_s", {"type": "S"}, None)],
    ),
    (
        "enum-value-added",
        lambda d: d["E"]["fields"].update(C=3),
        [change_key("enum-value-added", "E.C", None, 3)],
    ),
    (
        "enum-value-removed",
        lambda d: d["E"]["fields"].pop("A"),
        [change_key("enum-value-removed", "E.A", 1, None)],
    ),
    (
        "enum-value-renumbered",
        lambda d: d["E"]["fields"].update(B=7),
        [change_key("enum-value-renumbered", "E.B", 2, 7)],
    ),
    (
        "field-order-changed",
        lambda d: d["U"].update(fields={"as_s": {"type": "S"}, "as_int": INT}),
        [change_key("field-order-changed", "U", ["as_int", "as_s"], ["as_s", "as_int"])],
    ),
    (
        "field-id-reused",
        _remove_a_add_c,
        [
            change_key("field-removed", "S.a", INT, None),
            change_key("field-added-required", "S.c", None, INT),
            change_key("field-id-reused", "S.c", "a", "c"),
        ],
    ),
]


def test_every_rule_has_a_case() -> None:
    assert [rule for rule, _, _ in CASES] == list(RULES)


@pytest.mark.parametrize(("rule", "edit", "expected"), CASES, ids=[c[0] for c in CASES])
def test_synthetic_pair(
    rule: str, edit: Callable[[dict[str, Any]], Any], expected: list[Change]
) -> None:
    old, new = _with_ids(BASE), _with_ids(_edit(edit))
    d = schema.diff(old, new)
    assert [change_key(c.rule, c.path, c.old, c.new) for c in d.changes] == expected
    flags = {c.rule: (c.breaks_forward, c.breaks_backward, c.bump) for c in d.changes}
    assert flags[rule] == RULES[rule][1:]
    assert d.required_bump == max((c.bump for c in d.changes), key=["none", "minor", "major"].index)
    assert schema.diff(new, new).changes == []


def test_field_id_reuse_needs_ids() -> None:
    changes = schema.diff(BASE, _edit(_remove_a_add_c)).changes
    assert [c.rule for c in changes] == ["field-removed", "field-added-required"]


def test_field_id_reuse_between_known_versions() -> None:
    old = schema.describe_with_ids("8.20")
    assert old["Node"]["fields"]["name"] == {"type": "Optional[str]", "default": "None", "id": 60}
    new = copy.deepcopy(old)
    new["Node"]["fields"]["label"] = new["Node"]["fields"].pop("name")
    assert [c.message for c in schema.diff(old, new).changes] == [
        "Node.name: field-removed (Optional[str] = None -> -)",
        "Node.label: field-added-with-default (- -> Optional[str] = None)",
        "Node.label: field-id-reused (name -> label)",
    ]


def test_describe_with_ids_is_describe_plus_ids() -> None:
    for v in schema.versions():
        if not v.describable:
            continue
        with_ids = schema.describe_with_ids(v.version)
        stripped = copy.deepcopy(with_ids)
        for spec in types_of(stripped).values():
            if spec["kind"] != "enum":
                assert all(isinstance(f.pop("id"), int) for f in spec["fields"].values())
        assert stripped == schema.describe(v.version)


# ---------------------------------------------------------------- verdicts


def test_verdict_type_change_within_major_5(releases: Releases) -> None:
    v = schema.compatibility(_file(releases, "2.3.0"), _file(releases, "2.4.0"), "FULL")
    assert (v.old_version, v.new_version) == ("5.1", "5.3")
    assert (v.required_bump, v.actual_bump, v.numbers_follow_rules) == ("major", "minor", False)
    assert [c.path for c in v.unmet] == ["OptionalTensorArgument.as_tensor"]
    assert v.message is not None
    assert "5.1 -> 5.3" in v.message
    assert "OptionalTensorArgument.as_tensor: field-type-changed (str -> TensorArgument)" in (
        v.message
    )
    assert not v.ok
    assert [c.path for c in v.violations] == [
        "InputSpec.token",
        "InputSpec.constant_input",
        "OptionalTensorArgument.as_tensor",
        "OutputSpec.token",
    ]
    backward = schema.compatibility(
        _file(releases, "2.3.0"), _file(releases, "2.4.0"), schema.Mode.BACKWARD
    )
    assert [c.path for c in backward.violations] == ["OptionalTensorArgument.as_tensor"]


def test_verdict_type_removals_within_major_8(releases: Releases) -> None:
    v = schema.compatibility(_file(releases, "2.8.0"), _file(releases, "2.9.0"), "BACKWARD")
    assert (v.required_bump, v.actual_bump, v.numbers_follow_rules) == ("major", "minor", False)
    assert [c.message for c in v.violations] == [
        "Model: type-removed (struct -> -)",
        "Program: type-removed (struct -> -)",
    ]
    assert [c.path for c in v.unmet] == ["Model", "Program"]
    forward = schema.compatibility(_file(releases, "2.8.0"), _file(releases, "2.9.0"), "FORWARD")
    assert [c.path for c in forward.violations] == [
        "Argument.as_complex",
        "OutputSpec.parameter_mutation",
        "ScalarType.FLOAT8E4M3FNUZ",
        "ScalarType.FLOAT8E5M2FNUZ",
    ]


def test_verdict_removal_with_major_bump(releases: Releases) -> None:
    v = schema.compatibility(_file(releases, "2.4.1"), _file(releases, "2.5.0"), "FULL")
    assert (v.old_version, v.new_version) == ("5.3", "7.3")
    assert (v.required_bump, v.actual_bump, v.numbers_follow_rules) == ("major", "major", True)
    assert v.message is None
    assert v.unmet == []
    assert [c.message for c in v.violations] == [
        "ExportedProgram.dialect: field-removed (str -> -)"
    ]
    backward = schema.compatibility(_file(releases, "2.4.1"), _file(releases, "2.5.0"), "backward")
    assert backward.ok
    assert backward.violations == []


def test_verdict_identical_releases(releases: Releases) -> None:
    v = schema.compatibility(_file(releases, "2.12.0"), "8.20", "FULL_TRANSITIVE")
    assert v.ok
    assert (v.required_bump, v.actual_bump, v.numbers_follow_rules) == ("none", "none", True)
    assert v.checked == [("8.20", "8.20")]


def test_transitive_checks_every_known_version_between() -> None:
    direct = schema.compatibility("8.2", "8.20", "BACKWARD")
    assert direct.ok
    assert direct.checked == [("8.2", "8.20")]
    transitive = schema.compatibility("8.2", "8.20", "BACKWARD_TRANSITIVE")
    assert transitive.checked == [
        ("8.2", "8.20"),
        ("8.7", "8.20"),
        ("8.8", "8.20"),
        ("8.14", "8.20"),
        ("8.15", "8.20"),
        ("8.17", "8.20"),
    ]
    assert not transitive.ok
    assert [c.message for c in transitive.violations] == [
        "Model: type-removed (struct -> -)",
        "Program: type-removed (struct -> -)",
    ]
    assert transitive.required_bump == direct.required_bump == "minor"
    forward = schema.compatibility("8.2", "8.20", "FORWARD_TRANSITIVE")
    assert {c.rule for c in forward.violations} == {"union-arm-added", "enum-value-added"}
    full = schema.compatibility("8.2", "8.20", "FULL_TRANSITIVE")
    assert {c.path for c in full.violations} == {c.path for c in forward.violations} | {
        "Model",
        "Program",
    }


def test_version_going_backwards() -> None:
    v = schema.compatibility("8.20", "8.17", "FULL")
    assert v.actual_bump == "none"
    assert not v.numbers_follow_rules
    assert v.message == "SCHEMA_VERSION went 8.20 -> 8.17: backwards"


def test_unknown_mode() -> None:
    with pytest.raises(schema.UnknownMode, match="unknown compatibility mode 'SIDEWAYS'"):
        schema.compatibility("8.2", "8.7", "SIDEWAYS")


# ---------------------------------------------------------------- descriptions


def test_load_description_reads_every_release(history_dir: Path, releases: Releases) -> None:
    for release, parsed in releases:
        raw = (history_dir / f"torch-{release}.schema.yaml").read_bytes()
        assert schema.load_description(raw) == parsed, release
    as_json = orjson.dumps(schema.describe("8.20"))
    assert schema.load_description(as_json) == schema.describe("8.20")


def _yaml(d: Any) -> str:
    return yaml.safe_dump(d, sort_keys=False)


BAD_DESCRIPTIONS: list[tuple[str, str]] = [
    ("- 1\n- 2\n", "a description maps type names"),
    (_yaml({"S": BASE["S"]}), "SCHEMA_VERSION must be a list [major, minor]"),
    (_yaml({**BASE, "SCHEMA_VERSION": [8, True]}), "SCHEMA_VERSION must be a list"),
    (_yaml({**BASE, "TREESPEC_VERSION": "1"}), "TREESPEC_VERSION must be an integer"),
    (_yaml({**BASE, "S": {"kind": "class", "fields": {}}}), "S: kind must be one of"),
    (_yaml({**BASE, "S": {"kind": "struct"}}), "S: a type has exactly the keys kind and fields"),
    (_yaml({**BASE, "S": {"kind": "struct", "fields": [1]}}), "S: fields must be a mapping"),
    (_yaml({**BASE, "E": {"kind": "enum", "fields": {"A": "1"}}}), "E.A: an enum value must be"),
    (_yaml({**BASE, "S": {"kind": "struct", "fields": {"a": INT, "b": "int"}}}), "S.b: a struct"),
    (
        _yaml({**BASE, "S": {"kind": "struct", "fields": {"a": {"type": "List[int"}}}}),
        "S.a: malformed type",
    ),
    (
        _yaml({**BASE, "S": {"kind": "struct", "fields": {"a": {"type": "Tensor"}}}}),
        "S.a: unknown type 'Tensor'",
    ),
    (
        _yaml({**BASE, "S": {"kind": "struct", "fields": {"a": {"type": "Dict[str]"}}}}),
        "S.a: Dict takes 2 type argument(s)",
    ),
    (
        _yaml({**BASE, "U": {"kind": "union", "fields": {"x": {"type": "int", "default": "0"}}}}),
        "U.x: a union field has the keys id, type",
    ),
    (
        _yaml({**BASE, "S": {"kind": "struct", "fields": {"a": {"type": "int", "default": 0}}}}),
        "S.a: default must be a string",
    ),
    (
        _yaml({**BASE, "not a name": copy.deepcopy(BASE["S"])}),
        "type name 'not a name' is not an identifier",
    ),
    ("a: &x [1]\nb: *x\n", "the description uses a YAML alias"),
    ("S: [unclosed\n", "not valid YAML"),
    ('{"S": ', "not valid JSON"),
    (b"\xff\xfe".decode("latin-1"), "a description maps type names"),
]


@pytest.mark.parametrize(("text", "message"), BAD_DESCRIPTIONS)
def test_bad_descriptions(text: str, message: str) -> None:
    with pytest.raises(schema.DescriptionInvalid) as info:
        schema.load_description(text)
    assert message in str(info.value)
    assert info.value.code == "invalid-description"


def test_description_limits() -> None:
    with pytest.raises(schema.DescriptionInvalid, match="at most 1000000 are read"):
        schema.load_description(b" " * 1_000_001)
    with pytest.raises(schema.DescriptionInvalid, match="not UTF-8"):
        schema.load_description(b"\xff\xfe")
    with pytest.raises(schema.DescriptionInvalid, match="nested too deeply"):
        schema.load_description("[" * 5000 + "]" * 5000)


def test_diff_checks_dict_descriptions() -> None:
    with pytest.raises(schema.DescriptionInvalid, match="S.a: unknown type 'Nope'"):
        schema.diff(BASE, _edit(lambda d: d["S"]["fields"]["a"].update(type="Nope")))
    with pytest.raises(schema.UnknownVersion):
        schema.diff("7.3", "8.20")
    assert check_description(BASE) is BASE


def test_distant_releases_diff_as_their_files_show(releases: Releases) -> None:
    """Non-neighbouring releases (the pair the bench times): every change the files show."""
    a, b = _file(releases, "2.5.0"), _file(releases, "2.15.0")
    d = schema.diff(a, b)
    assert changes_of(d) == expected_changes(a, b)
    assert len(d.changes) == 44
    assert (d.old_version, d.new_version) == ("7.3", "8.20")
