"""app.programs.for_release: the document an older torch release reads, or the coded refusal
(its archive layout, an operator it lacks, or what its schema cannot say, with the pointer)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import schema
from app.failure import Failure
from app.programs.for_release import for_release, resolve
from app.releases import UnknownRelease, releases, rules
from tests.releases.record import DATA as MATRIX


def _doc(raw: bytes, change: Any = None) -> schema.ExportedProgram:
    tree = orjson.loads(raw)
    if change is not None:
        change(tree)
    loaded: schema.ExportedProgram = schema.load(orjson.dumps(tree))
    return loaded


def test_a_release_is_named_as_users_write_it() -> None:
    assert resolve("2.10") == "2.10.0"
    assert resolve("2.10.0") == "2.10.0"
    assert resolve(" 2.12.1+cu130 ") == "2.12.1"
    newest_14 = [r for r in releases() if r.startswith("2.14.")][-1]
    assert resolve("2.14") == newest_14
    for unknown in ("2.99", "2.10.7", "3", "latest", ""):
        with pytest.raises(UnknownRelease, match="known releases: 2.6.0"):
            resolve(unknown)


@pytest.mark.parametrize("release", ["2.11.0", "2.12.1", "2.13.0"])
def test_releases_that_know_node_names_get_them(release: str, zoo_json: dict[str, bytes]) -> None:
    doc = _doc(zoo_json["multi_out"])
    target, out = for_release(doc, release)
    assert target.release == release
    assert out.version == schema.format_version(rules(release).schema_version)
    names = [node.get("name") for node in out.tree["graph_module"]["graph"]["nodes"]]
    assert names == [node.name for node in doc.graph_module.graph.nodes]


def test_node_names_a_reader_works_out_are_dropped(zoo_json: dict[str, bytes]) -> None:
    # conv: every node calls an operator returning one Tensor and is named after it
    target, out = for_release(_doc(zoo_json["conv"]), "2.10")
    assert (target.release, out.version, out.dropped) == ("2.10.0", "8.15", ["Node.name"])
    assert all("name" not in n for n in out.tree["graph_module"]["graph"]["nodes"])


def test_node_names_a_reader_would_make_up_are_refused(zoo_json: dict[str, bytes]) -> None:
    # multi_out's first node returns several tensors: torch 2.10 lets FX name it
    doc = _doc(zoo_json["multi_out"])
    with pytest.raises(schema.DowngradeRefused) as refused:
        for_release(doc, "2.10.0")
    first = refused.value.issues[0]
    assert (first.code, first.path) == ("field-not-in-version", "/graph_module/graph/nodes/0/name")
    assert refused.value.code == "downgrade-refused"


def test_a_node_named_after_its_output_under_another_name_is_refused(
    zoo_json: dict[str, bytes],
) -> None:
    def rename(tree: dict[str, Any]) -> None:
        tree["graph_module"]["graph"]["nodes"][1]["name"] = "renamed"

    with pytest.raises(schema.DowngradeRefused) as refused:
        for_release(_doc(zoo_json["conv"], rename), "2.10")
    assert [i.path for i in refused.value.issues] == ["/graph_module/graph/nodes/1/name"]


@pytest.mark.parametrize("release", ["2.6", "2.7", "2.8.0"])
def test_releases_reading_pickled_weights_are_refused(
    release: str, zoo_json: dict[str, bytes]
) -> None:
    with pytest.raises(Failure) as refused:
        for_release(_doc(zoo_json["conv"]), release)
    assert refused.value.code == "release-archive-layout"
    assert "reads weights as pickles" in refused.value.message


def test_an_operator_the_release_lacks_is_refused_by_name(zoo_json: dict[str, bytes]) -> None:
    def polar(tree: dict[str, Any]) -> None:
        tree["graph_module"]["graph"]["nodes"][0]["target"] = "torch.ops.aten.linalg_polar.default"

    doc = _doc(zoo_json["conv"], polar)
    assert for_release(doc, "2.14.1")[1].version == "8.20"
    with pytest.raises(Failure) as refused:
        for_release(doc, "2.13")
    assert refused.value.code == "release-missing-operator"
    assert [(i.path, i.message) for i in refused.value.issues] == [
        ("/graph_module/graph/nodes/0", "aten::linalg_polar: torch 2.13.0 has no such operator")
    ]


def test_a_python_target_the_release_does_not_read_is_refused() -> None:
    # torch.vmap as torch 2.13 writes it: plain functions as node targets, which torch 2.12's
    # reader has no branch for (the real load fails: tests/data/releases/loads.json)
    doc = schema.load((MATRIX / "2.13.0" / "vmap.json").read_bytes())
    targets = {i: node.target for i, node in enumerate(doc.graph_module.graph.nodes)}
    assert for_release(doc, "2.13")[1].version == "8.20"
    with pytest.raises(Failure) as refused:
        for_release(doc, "2.12.1")
    assert refused.value.code == "release-missing-operator"
    assert refused.value.message == (
        "torch 2.12.1 cannot run the program: torch._functorch.predispatch."
        "lazy_load_decompositions: torch 2.12.1 does not read this Python target (and 4 more)"
    )
    assert [(i.path, i.message) for i in refused.value.issues] == [
        (f"/graph_module/graph/nodes/{i}", f"{t}: torch 2.12.1 does not read this Python target")
        for i, t in targets.items()
        if t.startswith("torch._functorch.predispatch.")
    ]
    assert len(refused.value.issues) == 5
