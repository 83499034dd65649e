"""The models' history against torch's released schema.yaml files and torch's own schema.py."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import torch._export.serde.schema as torch_schema
import yaml

import schema
from schema.description import arm_fields, struct_fields
from schema.models import STRUCTS, UNIONS


def _history(history_dir: Path) -> dict[str, dict[str, typing.Any]]:
    return {
        p.name.removeprefix("torch-").removesuffix(".schema.yaml"): yaml.safe_load(p.read_text())
        for p in sorted(history_dir.glob("torch-*.schema.yaml"))
    }


def _assert_same(ours: dict[str, typing.Any], ref: dict[str, typing.Any]) -> None:
    assert sorted(ours) == sorted(ref)
    for name, spec in ref.items():
        assert ours[name] == spec, name
        if isinstance(spec, dict):
            assert list(ours[name]["fields"]) == list(spec["fields"]), f"field order of {name}"


def test_current_equals_installed_torch_yaml() -> None:
    installed = Path(torch_schema.__file__).with_name("schema.yaml")
    ref = yaml.safe_load(installed.read_text())
    assert tuple(ref["SCHEMA_VERSION"]) == schema.CURRENT == torch_schema.SCHEMA_VERSION
    _assert_same(schema.describe(schema.CURRENT), ref)


def test_every_8x_release_described(history_dir: Path) -> None:
    checked = set()
    for _release, ref in _history(history_dir).items():
        version = tuple(ref["SCHEMA_VERSION"])
        if version[0] != 8:
            with pytest.raises(schema.UnknownVersion):
                schema.describe(schema.format_version(version))
            continue
        _assert_same(schema.describe(schema.format_version(version)), ref)
        checked.add(version)
    assert checked == {(8, 2), (8, 7), (8, 8), (8, 14), (8, 15), (8, 17), (8, 20)}


def test_versions_list_the_releases_that_write_them(history_dir: Path) -> None:
    expected: dict[tuple[int, int], list[str]] = {}
    for release, ref in _history(history_dir).items():
        expected.setdefault(tuple(ref["SCHEMA_VERSION"]), []).append(release)
    listed = {v.version: sorted(v.torch_releases) for v in schema.versions()}
    assert listed == {v: sorted(r) for v, r in expected.items()}
    assert [v.version for v in schema.versions() if v.describable] == sorted(
        v for v in expected if v[0] == 8
    )


def test_field_ids_equal_torch_schema_py() -> None:
    for name, model in STRUCTS.items():
        if model.__until__ is not None:
            continue
        hints = typing.get_type_hints(getattr(torch_schema, name), include_extras=True)
        ids = {n: typing.get_args(h)[1] for n, h in hints.items() if typing.get_args(h)}
        assert {f.name: f.id for f in struct_fields(model)} == ids, name
    for name, union in UNIONS.items():
        hints = typing.get_type_hints(getattr(torch_schema, name), include_extras=True)
        ids = {n: typing.get_args(h)[1] for n, h in hints.items() if n != "_type"}
        assert {f.name: f.id for f in arm_fields(union)} == ids, name


@pytest.mark.parametrize("text", ["8", "8.x", "x.1", "", "8.20.1", "99999.1"])
def test_bad_version_strings(text: str) -> None:
    with pytest.raises(schema.UnknownVersion):
        schema.describe(text)
