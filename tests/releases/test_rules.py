"""Each release's rules: what the shipped files hold, and how documents pick the rules they are
judged by."""

from __future__ import annotations

import gzip
import json
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from app.programs import opset
from app.releases import (
    INSTALLED,
    UnknownRelease,
    installed,
    judging,
    release_key,
    releases,
    rules,
)
from app.releases.generate import READERS, RELEASES, data_file, readers_table
from schema.compat import reader_policy
from schema.readers import READERS as TABLE


def test_every_release_from_2_6_to_2_15_has_rules_oldest_first() -> None:
    assert releases() == RELEASES
    assert list(releases()) == sorted(releases(), key=release_key)
    assert installed().release == INSTALLED == "2.13.0"
    with pytest.raises(UnknownRelease) as refused:
        rules("2.5.0")
    assert refused.value.code == "unknown-torch-release"


def test_each_file_records_its_release_and_how_it_was_made() -> None:
    for release in releases():
        raw = json.loads(gzip.decompress(data_file(release).read_bytes()))
        assert raw["release"] == release
        assert raw["torch"].split("+")[0] == release
        assert raw["source"]
        # reproducible bytes: a zero mtime in the gzip header
        assert data_file(release).read_bytes()[4:8] == b"\0\0\0\0"


def test_reader_policies_as_each_release_answered_its_probe() -> None:
    for release in releases():
        r = rules(release)
        strict = release_key(release) < (2, 9, 0)
        assert r.unknown_keys == ("fatal" if strict else "skip"), release
        assert r.unknown_arms == r.unknown_enum_values == "fatal", release
        # cond's one result written as torch 2.6 writes it: read by 2.6 and 2.7 only
        assert r.hop_list_output == ("fatal" if release_key(release) >= (2, 8, 0) else "skip")
    assert [rules(r).schema_version for r in releases()] == [
        (8, 2),
        (8, 7),
        (8, 8),
        (8, 14),
        (8, 15),
        (8, 17),
        (8, 20),
        (8, 20),
        (8, 20),
        (8, 20),
    ]


def test_the_schema_packages_reader_table_is_the_rules() -> None:
    assert READERS.read_text() == readers_table()
    for release in releases():
        assert reader_policy(release) == rules(release).unknown_keys
        assert TABLE[".".join(release.split(".")[:2])] == rules(release).unknown_keys


def test_operators_that_came_and_went() -> None:
    assert installed().has_operator("aten", "qr")
    assert not rules("2.14.1").has_operator("aten", "qr")
    assert not rules("2.14.1").has_operator("aten", "cholesky")
    for name in ("linalg_polar", "linalg_matrix_sqrth"):
        assert not installed().has_operator("aten", name)
        assert rules("2.14.1").has_operator("aten", name)
        assert rules("2.15.0").has_operator("aten", name)
    # 2.13 has the operator; its Tensor overload is new in 2.14
    assert installed().overloads("aten", "_philox_key_fold_in") == ("default",)
    assert rules("2.14.1").overloads("aten", "_philox_key_fold_in") == ("Tensor", "default")
    for name in ("_scaled_addmm", "_philox_randint"):
        assert not rules("2.14.1").has_operator("aten", name)
        assert rules("2.15.0").lookup("aten", name, "default") is not None


def test_archive_layouts_each_release_saves_and_reads() -> None:
    layouts = {r: rules(r).archive_layout for r in releases()}
    assert [r for r, layout in layouts.items() if layout == "legacy"] == ["2.6.0", "2.7.1"]
    # every release reads the serialized_exported_program.json archive of 2.6 and 2.7
    assert all(rules(r).reads_legacy_archive for r in releases())


def test_pytree_types_each_release_registers() -> None:
    polar = "torch.return_types.linalg_polar"
    assert [r for r in releases() if polar in rules(r).pytree_types()] == ["2.15.0"]
    for release in releases():
        assert {"builtins.tuple", "builtins.dict", "collections.namedtuple"} <= (
            rules(release).pytree_types()
        )


def test_the_opset_module_is_a_view_of_the_installed_rules() -> None:
    assert opset.torch_version() == installed().torch
    assert opset.lookup("aten", "add", "Tensor") == installed().lookup("aten", "add", "Tensor")
    assert list(opset.schemas()) == list(installed().schemas())
    assert opset.python_targets() == installed().python_targets()


@pytest.mark.parametrize(
    ("written_by", "judge", "noted"),
    [
        ("2.14.1+cu128", "2.14.1", False),
        ("2.13.0+cpu", "2.13.0", False),
        ("2.14.0", "2.14.1", True),
        ("2.16.0.dev20261101", "2.15.0", True),
        (None, "2.15.0", True),
        ("", "2.15.0", True),
        ("garbage", "2.15.0", True),
    ],
)
def test_a_document_is_judged_by_the_release_that_wrote_it(
    written_by: str | None, judge: str, noted: bool
) -> None:
    r, note = judging(written_by)
    assert r.release == judge
    assert (note is not None) == noted


def test_the_torch_extra_admits_every_release_we_ship_rules_for_from_2_13() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    [requirement] = [Requirement(r) for r in project["project"]["optional-dependencies"]["torch"]]
    assert requirement.name == "torch"
    # pip keeps an installed torch the specifier admits (2.15.0+cu132 included), so a team on
    # 2.14 or 2.15 is not downgraded; each release it admits is one we hold rules for
    for release in releases():
        admitted = requirement.specifier.contains(release)
        assert admitted == (release_key(release) >= (2, 13, 0)), release
        assert requirement.specifier.contains(f"{release}+cu132") == admitted
    for other in ("2.12.1", "2.16.0", "3.0.0"):
        assert not requirement.specifier.contains(other)
