"""Programs are judged by the release that wrote them; a worker refuses what its torch lacks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

import schema
from app import operations as ops
from app.cli import EXIT_OK, main
from app.main import create_app
from app.operations import OperationFailure
from app.programs.validation import validate_document
from app.releases import lacking, releases_with, rules, running
from app.settings import Settings
from app.tensors.sources import TensorSource
from tests.releases.written import archive, document

SETTINGS = Settings()


@pytest.mark.parametrize(
    "name",
    ["torch-2.13.0-qr_cholesky", "torch-2.14.1-linalg_polar", "torch-2.15.0-philox_randint"],
)
def test_a_program_is_valid_by_the_release_that_wrote_it(name: str) -> None:
    with ops.open_source(archive(name), "zip", SETTINGS) as source:
        report = ops.check(source, "semantic", SETTINGS)
    assert report.valid, report.findings
    assert not [f for f in report.findings if f.severity != "info"], report.findings


def test_the_release_that_wrote_it_is_in_its_readable_by() -> None:
    report = validate_document(document("torch-2.14.1-linalg_polar"), "semantic", SETTINGS.limits)
    assert report.readable_by == ["2.14.1", "2.15.0"]
    assert report.oldest_torch_release == "2.14.1"
    qr = validate_document(document("torch-2.13.0-qr_cholesky"), "semantic", SETTINGS.limits)
    assert qr.readable_by == ["2.11.0", "2.12.1", "2.13.0"]


def test_without_a_known_torch_version_the_newest_release_judges_and_says_so() -> None:
    doc = document("torch-2.13.0-qr_cholesky").model_copy(update={"torch_version": None})
    report = validate_document(doc, "semantic", SETTINGS.limits)
    [note] = [f for f in report.findings if f.code == "torch-release-unknown"]
    assert (note.severity, note.path) == ("warning", "/torch_version")
    assert "judged by torch 2.15.0, the newest known" in note.message
    unknown = [f for f in report.findings if f.code == "operator-unknown"]
    having = releases_with("aten", "qr", "default")
    assert having == releases_with("aten", "cholesky", "default")
    assert having[-2:] == ("2.12.1", "2.13.0")
    assert [f.message for f in unknown] == [
        f"torch.ops.aten.{name}.default: torch 2.15.0+cu132 has no operator aten::{name}; "
        f"torch {', '.join(having)} have it"
        for name in ("qr", "cholesky")
    ]
    assert not report.valid


def test_the_screen_still_refuses_what_it_refuses_whichever_release_judges() -> None:
    doc = orjson.loads(schema.dump(document("torch-2.14.1-linalg_polar")))
    doc["graph_module"]["graph"]["nodes"][0]["target"] = "torch.ops.aten._segment_reduce.default"
    doc["graph_module"]["graph"]["nodes"][1]["target"] = "torch.ops.aten.__class__.default"
    report = validate_document(schema.load(orjson.dumps(doc)), "semantic", SETTINGS.limits)
    codes = {f.code for f in report.findings if f.severity == "error"}
    assert "unsafe-target" in codes, report.findings


def _polar_deserialized(source: ops.Source) -> None:
    ops.buildable(source, TensorSource(archive=archive("torch-2.14.1-linalg_polar")), SETTINGS)


def test_a_worker_whose_torch_lacks_an_operator_refuses_before_torch_runs() -> None:
    assert running() == "2.13.0+cpu"
    with ops.open_source(archive("torch-2.14.1-linalg_polar"), "zip", SETTINGS) as source:
        with pytest.raises(OperationFailure) as refused:
            _polar_deserialized(source)
    assert refused.value.code == "operator-not-in-release"
    assert [i.message for i in refused.value.issues] == [
        "aten::linalg_matrix_sqrth: torch 2.13.0 has no such operator (torch 2.14.1, 2.15.0 "
        "have it)",
        "aten::linalg_polar: torch 2.13.0 has no such operator (torch 2.14.1, 2.15.0 have it)",
    ]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data: Path = tmp_path_factory.mktemp("data")
    with TestClient(create_app(Settings(data_dir=data, workers=1))) as opened:
        yield opened


def test_http_deserialize_answers_a_coded_422(client: TestClient) -> None:
    pt2 = archive("torch-2.14.1-linalg_polar").read_bytes()
    answer = client.post("/v1/deserialize", files={"document": pt2})
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"].endswith("/operator-not-in-release")
    assert "torch 2.14.1, 2.15.0 have it" in problem["detail"]


def test_readiness_says_which_torch_the_workers_run(client: TestClient) -> None:
    ready = client.get("/readyz").json()
    assert ready == {"status": "ready", "torch": "2.13.0+cpu", "torch_release": "2.13.0"}


def test_cli_deserialize_refuses_with_the_code_and_each_operator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.pt2"
    pt2 = str(archive("torch-2.14.1-linalg_polar"))
    code = main(["deserialize", pt2, "-o", str(out)])
    err = capsys.readouterr().err
    assert code != EXIT_OK
    first, *issues = err.splitlines()
    assert first.startswith("pt2serde: operator-not-in-release: the workers run torch 2.13.0")
    assert [line.split("/", 1)[1].strip() for line in issues] == [
        "aten::linalg_matrix_sqrth: torch 2.13.0 has no such operator (torch 2.14.1, 2.15.0 "
        "have it)",
        "aten::linalg_polar: torch 2.13.0 has no such operator (torch 2.14.1, 2.15.0 have it)",
    ]
    assert not out.exists()


def test_the_screen_takes_what_the_writer_or_the_pinned_torch_registers() -> None:
    doc = orjson.loads(schema.dump(document("torch-2.14.1-linalg_polar")))
    node = doc["graph_module"]["graph"]["nodes"][0]
    node["target"] = "torch.ops.higher_order.switch"  # a higher-order op new in 2.14
    written = schema.load(orjson.dumps(doc))
    assert not [
        f
        for f in validate_document(written, "semantic", SETTINGS.limits).findings
        if f.code == "unsafe-target"
    ]
    node["target"] = "torch.ops.higher_order.no_such_hop"
    refused = validate_document(schema.load(orjson.dumps(doc)), "semantic", SETTINGS.limits)
    assert [f.code for f in refused.findings if f.severity == "error"] == ["unsafe-target"]
    # a 2.13 worker resolves neither; it refuses the first before torch sees it
    assert (
        "torch.ops.higher_order.switch",
        ("higher_order.switch: torch 2.13.0 has no such higher-order operator"),
    ) in lacking(written, rules("2.13.0"))


@pytest.mark.parametrize("depth", [3000, 100_000])
def test_a_treespec_nested_past_the_parser_is_a_finding_not_a_crash(depth: int) -> None:
    doc = document("torch-2.14.1-linalg_polar")
    signature = next(e.signature for e in doc.graph_module.module_call_graph if e.signature)
    assert signature is not None
    opening = '{"type": "builtins.tuple", "context": "null", "children_spec": ['
    leaf = '{"type": null, "context": null, "children_spec": []}'
    signature.in_spec = "[1, " + opening * depth + leaf + "]}" * depth + "]"
    report = validate_document(doc, "semantic", SETTINGS.limits)
    assert not report.valid
    assert "unsafe-treespec" in {f.code for f in report.findings}
