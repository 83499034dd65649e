"""Which releases load a document: verdicts against real loads, reader policies, operators."""

from __future__ import annotations

import orjson
import pytest

import schema
from app.releases import releases, verdicts
from tests.releases.record import DATA as MATRIX
from tests.releases.written import document

#: The releases whose `torch.export.load` loaded each written program, from a real load in a
#: venv of every release we ship rules for (tests/data/release_programs/README.md); every other
#: release failed on it.
LOADED_BY: dict[str, list[str]] = {
    "torch-2.6.0-cond": ["2.6.0", "2.7.1"],
    "torch-2.13.0-qr_cholesky": ["2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0"],
    "torch-2.14.1-linalg_polar": ["2.14.1", "2.15.0"],
    "torch-2.15.0-philox_randint": ["2.15.0"],
    "torch-2.15.0-polar_namedtuple": ["2.15.0"],
}


@pytest.mark.parametrize("name", sorted(LOADED_BY))
def test_verdicts_agree_with_real_loads_in_every_release(name: str) -> None:
    found = verdicts(document(name))
    assert [v.release for v in found] == list(releases())
    assert [v.release for v in found if v.readable] == LOADED_BY[name]
    for v in found:
        assert bool(v.reasons) != v.readable, v


def test_why_a_release_cannot_read_a_program() -> None:
    qr = {v.release: v for v in verdicts(document("torch-2.13.0-qr_cholesky"))}
    assert qr["2.7.1"].reasons[0] == (
        "its archive: torch 2.13.0 saves the models/ layout, torch 2.7.1 reads only "
        "serialized_exported_program.json archives"
    )
    assert qr["2.14.1"].reasons == (
        "aten::cholesky: torch 2.14.1 has no such operator",
        "aten::qr: torch 2.14.1 has no such operator",
    )
    sqrth = {v.release: v for v in verdicts(document("torch-2.14.1-linalg_polar"))}
    assert sqrth["2.13.0"].reasons == (
        "aten::linalg_matrix_sqrth: torch 2.13.0 has no such operator",
        "aten::linalg_polar: torch 2.13.0 has no such operator",
    )
    philox = {v.release: v for v in verdicts(document("torch-2.15.0-philox_randint"))}
    # torch 2.9.1 fails on the uint64 dtype (KeyError: 35) before it meets the operator
    assert any("ScalarType.UINT64" in r for r in philox["2.9.1"].reasons), philox["2.9.1"]
    cond = {v.release: v for v in verdicts(document("torch-2.6.0-cond"))}
    assert cond["2.13.0"].reasons == (
        "torch.ops.higher_order.cond: its one result is a list with no "
        "is_hop_single_tensor_return (as torch 2.6 writes it); torch 2.13.0 reads that as one "
        "tensor and fails",
    )
    polar = {v.release: v for v in verdicts(document("torch-2.15.0-polar_namedtuple"))}
    assert polar["2.14.1"].reasons == (
        "pytree type torch.return_types.linalg_polar: torch 2.14.1 has not registered it",
    )


def test_an_8_17_document_is_read_from_2_9_ignoring_node_names(zoo_json: dict[str, bytes]) -> None:
    found = {v.release: v for v in verdicts(schema.load(zoo_json["conv"]))}
    for strict in ("2.6.0", "2.7.1", "2.8.0"):
        assert not found[strict].readable
        assert (
            f"unknown key Node.name (since 8.17): torch {strict}'s reader refuses keys it does "
            "not know"
        ) in found[strict].reasons
    for skipping in ("2.9.1", "2.10.0"):
        assert found[skipping].readable
        assert found[skipping].ignoring == ("Node.name",)
    for newer in ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"):
        assert found[newer].readable
        assert found[newer].ignoring == ()


def test_an_unknown_key_is_fatal_only_up_to_2_8(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    tree["graph_module"]["graph"]["nodes"][0]["from_the_future"] = 1
    found = {v.release: v for v in verdicts(schema.load(orjson.dumps(tree)))}
    assert any(
        "unknown key /graph_module/graph/nodes/0/from_the_future: torch 2.8.0's reader refuses" in r
        for r in found["2.8.0"].reasons
    ), found["2.8.0"]
    assert found["2.13.0"].readable


def test_another_major_is_refused_by_every_release(zoo_json: dict[str, bytes]) -> None:
    tree = orjson.loads(zoo_json["conv"])
    tree["schema_version"]["major"] = 9
    for v in verdicts(schema.load(orjson.dumps(tree))):
        assert not v.readable
        assert any(
            r.endswith("refuses documents of another major (this one is 9.x)") for r in v.reasons
        ), v


def test_plain_python_targets_are_read_from_2_13_on() -> None:
    # torch 2.13 exports torch.vmap as calls of plain functions (torch._functorch.predispatch);
    # deserialize_node has a branch for a callable target only from 2.13, and the real loads
    # (tests/data/releases/loads.json) fail in every older release
    doc = schema.load((MATRIX / "2.13.0" / "vmap.json").read_bytes())
    found = {v.release: v for v in verdicts(doc)}
    assert [r for r, v in found.items() if v.readable] == ["2.13.0", "2.14.1", "2.15.0"]
    lacking = (
        "_add_batch_dim",
        "_remove_batch_dim",
        "_vmap_decrement_nesting",
        "_vmap_increment_nesting",
        "lazy_load_decompositions",
    )
    for release in ("2.9.1", "2.10.0", "2.11.0", "2.12.1"):
        said = f"torch {release} does not read this Python target"
        assert found[release].reasons == tuple(
            f"torch._functorch.predispatch.{name}: {said}" for name in lacking
        )
