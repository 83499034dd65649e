"""Versions torch's check cannot build for lack of a custom operator namespace, through the real
server: stored unverified where the organization allows it (PT2SERDE_ALLOW_UNVERIFIED), refused
with a hint where it does not, shown as such by the API, the CLI, search and webhooks, and
verified later by a server whose torch workers import the namespace (PT2SERDE_WORKER_IMPORTS).

The zoo's `custom_op` program calls `pt2zoo::fused_gelu`, which `tests.bridge.zoo_ops` registers
(the registry servers' usual PT2SERDE_WORKER_IMPORTS); a server started without that import has
torch workers that lack the namespace, as a service without transformers lacks Mixtral's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from alembic import command
from alembic.config import Config
from sqlalchemy import select

from app.cli import EXIT_INVALID, EXIT_OK, main
from app.jobs.push import prepare
from app.jobs.runners import INLINE
from app.jobs.torch import job_torch_check
from app.programs.findings import Report
from app.programs.torch_check import TorchCheck
from app.registry.audit import audit_log
from app.registry.db import MIGRATIONS
from app.registry.errors import RegistryFailure
from app.registry.records import Verified
from app.registry.store import Registry
from app.registry.verification import NAMESPACE_UNREGISTERED, again, at_push
from schema import Issue
from tests.realzoo import same_outputs, tiny_mixtral
from tests.registry.conftest import (
    Backend,
    RegistryServer,
    start_registry_server,
    stop_registry_server,
)
from tests.registry.databases import ON_DATABASES
from tests.registry.receiver import Receiver, receiver
from tests.registry.test_store import push
from tests.registry.test_webhooks_served import WEBHOOK_ENV
from tests.zoo import archive_bytes

#: the release a worker of this venv's torch reports (its build tag left out)
TORCH = torch.__version__.split("+")[0]
#: a server whose torch workers lack the pt2zoo namespace
WITHOUT_NAMESPACE = {"PT2SERDE_WORKER_IMPORTS": ""}
ZIP = {"Content-Type": "application/zip"}
UNVERIFIED = {"state": "unverified", "namespaces": ["pt2zoo"]}
VERIFIED = {"state": "verified", "torch": TORCH}


def _push(client: httpx.Client, name: str, archive: bytes) -> httpx.Response:
    return client.post(f"/v1/models/{name}/versions", content=archive, headers=ZIP)


def _search(client: httpx.Client, verified: bool) -> list[tuple[str, int]]:
    found = client.get("/v1/search", params={"verified": str(verified).lower()})
    assert found.status_code == 200, found.text
    return [(v["model"], v["version"]) for v in found.json()["versions"]]


def _cli(capsys: pytest.CaptureFixture[str], server: RegistryServer, *argv: str) -> str:
    code = main([*argv, "--url", server.url])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    return out


def _subscribe(client: httpx.Client, sink: Receiver) -> None:
    created = client.post("/v1/webhooks", json={"url": sink.url})
    assert created.status_code == 201, created.text
    assert "version.verified" in created.json()["events"]
    sink.secrets.append(created.json()["secret"])


def _event(sink: Receiver, kind: str, target: str) -> dict[str, Any]:
    sink.wait_for(
        lambda s: any(r.kind == kind and r.body["data"]["target"] == target for r in s.received)
    )
    (data,) = [
        r.body["data"]
        for r in sink.delivered().values()
        if r.kind == kind and r.body["data"]["target"] == target
    ]
    return data


@ON_DATABASES
def test_unverified_push_then_verify(
    backend: Backend, archives: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    with receiver() as sink:
        allowing = {**WEBHOOK_ENV, **WITHOUT_NAMESPACE, "PT2SERDE_ALLOW_UNVERIFIED": "true"}
        server = start_registry_server(backend, allowing)
        try:
            with server.client(timeout=120) as client:
                _subscribe(client, sink)
                pushed = _push(client, "moe", archives["custom_op"])
                assert pushed.status_code == 201, pushed.text
                assert pushed.json()["verification"] == UNVERIFIED
                plain = _push(client, "vision", archives["conv"])
                assert plain.json()["verification"] == VERIFIED
                assert client.get("/v1/models/moe/versions/1").json()["verification"] == UNVERIFIED
                listed = client.get("/v1/models/moe/versions").json()["versions"]
                assert [v["verification"] for v in listed] == [UNVERIFIED]
                assert _search(client, verified=False) == [("moe", 1)]
                assert _search(client, verified=True) == [("vision", 1)]
                # the workers still lack the namespace: a coded refusal, the state stays
                still = client.post("/v1/models/moe/versions/1/verify")
                assert still.status_code == 409, still.text
                assert still.json()["code"] == "namespace-unregistered"
                assert {e["code"] for e in still.json()["errors"]} == {NAMESPACE_UNREGISTERED}
                assert client.get("/v1/models/moe/versions/1").json()["verification"] == UNVERIFIED
            created = _event(sink, "version.created", "models/moe/versions/1")
            assert created["after"]["verification"] == UNVERIFIED
            plain_event = _event(sink, "version.created", "models/vision/versions/1")
            assert plain_event["after"]["verification"] == VERIFIED
            assert "unverified: pt2zoo" in _cli(capsys, server, "versions", "moe")
            assert "unverified: pt2zoo" in _cli(capsys, server, "show", "moe", "1")
            assert f"verified by torch {TORCH}" in _cli(capsys, server, "versions", "vision")
            assert "moe v1" in _cli(capsys, server, "search", "--unverified")
            assert main(["verify", "moe", "1", "--url", server.url]) == EXIT_INVALID
            assert "namespace-unregistered" in capsys.readouterr().err
        finally:
            stop_registry_server(server)

        # a server whose workers import the namespace verifies it (the CLI asks, as a person
        # would), audited and announced
        server = start_registry_server(backend, WEBHOOK_ENV)
        try:
            assert f"verified by torch {TORCH}" in _cli(capsys, server, "verify", "moe", "1")
            with server.client(timeout=120) as client:
                assert client.get("/v1/models/moe/versions/1").json()["verification"] == VERIFIED
                assert _search(client, verified=False) == []
                assert _search(client, verified=True) == [("vision", 1), ("moe", 1)]
                # asked again: answered as it is
                again_asked = client.post("/v1/models/moe/versions/1/verify")
                assert again_asked.json()["verification"] == VERIFIED
                audit = client.get("/v1/audit", params={"action": "version.verify"})
                (entry,) = audit.json()["entries"]
                assert (entry["target"], entry["before"], entry["after"]) == (
                    "models/moe/versions/1",
                    UNVERIFIED,
                    VERIFIED,
                )
            verified = _event(sink, "version.verified", "models/moe/versions/1")
            assert (verified["before"], verified["after"]) == (UNVERIFIED, VERIFIED)
        finally:
            stop_registry_server(server)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_unverified_push_refused_unless_allowed(
    backend: Backend, archives: dict[str, bytes]
) -> None:
    server = start_registry_server(backend, WITHOUT_NAMESPACE)
    try:
        with server.client(timeout=120) as client:
            refused = _push(client, "moe", archives["custom_op"])
            assert refused.status_code == 422, refused.text
            problem = refused.json()
            assert problem["code"] == "invalid-program"
            assert "PT2SERDE_ALLOW_UNVERIFIED=true" in problem["detail"]
            assert "PT2SERDE_WORKER_IMPORTS" in problem["detail"]
            assert {e["code"] for e in problem["errors"]} == {NAMESPACE_UNREGISTERED}
            assert client.get("/v1/models/moe").status_code == 404
            # a program torch's workers can build is stored verified as before
            plain = _push(client, "vision", archives["conv"])
            assert plain.json()["verification"] == VERIFIED
    finally:
        stop_registry_server(server)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_mixtral_verified_where_transformers_is_imported(
    backend: Backend, tmp_path: Path
) -> None:
    program = tiny_mixtral()
    assert "transformers.grouped_mm_fallback.default" in {
        str(n.target) for n in program.ep.graph.nodes
    }
    allowing = {**WITHOUT_NAMESPACE, "PT2SERDE_ALLOW_UNVERIFIED": "true"}
    server = start_registry_server(backend, allowing)
    try:
        with server.client(timeout=300) as client:
            pushed = _push(client, "mixtral", archive_bytes(program.ep))
            assert pushed.status_code == 201, pushed.text
            assert pushed.json()["verification"] == {
                "state": "unverified",
                "namespaces": ["transformers"],
            }
    finally:
        stop_registry_server(server)
    server = start_registry_server(
        backend, {"PT2SERDE_WORKER_IMPORTS": "transformers.integrations.moe"}
    )
    try:
        with server.client(timeout=300) as client:
            verified = client.post("/v1/models/mixtral/versions/1/verify")
            assert verified.status_code == 200, verified.text
            assert verified.json()["verification"] == VERIFIED
            served = client.get("/v1/models/mixtral/versions/1/archive")
    finally:
        stop_registry_server(server)
    # what the registry serves is the program torch exported: the same outputs
    (tmp_path / "served.pt2").write_bytes(served.content)
    loaded = torch.export.load(tmp_path / "served.pt2")
    assert same_outputs(loaded.module()(**program.kwargs), program.run())


# ---------------------------------------------------------------- the library and the database


class LackingNamespace:
    """A torch runner whose worker lacks the pt2zoo namespace, as one without the import."""

    def submit(self, job: Callable[..., Any], *args: object, timeout_s: float | None = None) -> Any:
        """torch's check as such a worker answers it."""
        assert job is job_torch_check, job
        return TorchCheck([_MISSING], ["pt2zoo"], torch=TORCH).to_dict()


@ON_DATABASES
def test_the_same_program_pushed_where_torch_builds_it_is_verified(
    backend: Backend, archives: dict[str, bytes]
) -> None:
    registry = Registry(backend.settings(allow_unverified=True))
    try:
        staged = registry.blobs.stage_bytes(archives["custom_op"])
        try:
            candidate = prepare(registry, staged.path, INLINE, LackingNamespace())
        finally:
            staged.discard()
        first = registry.push("moe", candidate)
        assert first.version.verification.model_dump() == UNVERIFIED
        again_pushed = push(registry, "moe", archives["custom_op"])
        assert (again_pushed.created, again_pushed.version.version) == (False, 1)
        assert again_pushed.version.verification.model_dump() == VERIFIED
        with registry.db.read() as conn:
            actions = [r.action for r in conn.execute(select(audit_log.c.action))]
        assert actions == ["version.push", "version.verify"]
    finally:
        registry.close()


@ON_DATABASES
def test_versions_from_before_the_migration_are_verified_by_an_unrecorded_release(
    backend: Backend, archives: dict[str, bytes]
) -> None:
    registry = Registry(backend.settings())
    try:
        assert push(registry, "vision", archives["conv"]).version.verification == Verified(
            torch=TORCH
        )
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with registry.db.write() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0005")
    finally:
        registry.close()
    reopened = Registry(backend.settings())  # migrates to the head again
    try:
        assert reopened.version("vision", "1").verification == Verified(torch=None)
    finally:
        reopened.close()


# ---------------------------------------------------------------- the verdicts, one by one

_MISSING = Issue(NAMESPACE_UNREGISTERED, "/graph_module/graph/nodes/3", "not registered")
_WRONG = Issue("torch-verifier-failed", "", "the verifier refused it")


def _valid_report() -> Report:
    return Report(
        valid=True,
        level="torch",
        findings=[],
        unknown_fields=[],
        min_schema_version="8.2",
        oldest_torch_release=TORCH,
        namespaces_to_register=["pt2zoo", "other"],
        unchecked=["torch"],
    )


def test_only_missing_namespaces_make_a_version_unverified() -> None:
    report = _valid_report()
    built = TorchCheck(torch=TORCH)
    missing = TorchCheck([_MISSING], ["pt2zoo"], torch=TORCH)
    wrong_too = TorchCheck([_MISSING, _WRONG], ["pt2zoo"], torch=TORCH)
    assert at_push(report, built, allow_unverified=False).model_dump() == VERIFIED
    # the namespaces torch lacked, not every custom one the program calls ("other" was there)
    assert at_push(report, missing, allow_unverified=True).model_dump() == UNVERIFIED
    for check in (wrong_too, TorchCheck([_WRONG], torch=TORCH)):
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "invalid-program") as refused:
            at_push(report, check, allow_unverified=True)
        assert "PT2SERDE_ALLOW_UNVERIFIED" not in str(refused.value)
    with pytest.raises(RegistryFailure, match="PT2SERDE_ALLOW_UNVERIFIED=true"):
        at_push(report, missing, allow_unverified=False)
    assert again(report, built).model_dump() == VERIFIED
    with pytest.raises(RegistryFailure, check=lambda e: e.code == "namespace-unregistered"):
        again(report, missing)
    with pytest.raises(RegistryFailure, check=lambda e: e.code == "invalid-program"):
        again(report, wrong_too)
