"""The CLI's registry commands against a live server: models, tags, aliases (protect, remove),
delete, version diffs, search and webhooks, with --json and with a person's text, and their
failures (usage errors exit 2, the server's problems 1 with the problem's code)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, main
from app.registry.store import Registry
from tests.registry.conftest import (
    Backend,
    RegistryServer,
    start_registry_server,
    stop_registry_server,
)
from tests.registry.databases import ON_DATABASES
from tests.registry.test_store import push

pytestmark = ON_DATABASES


@pytest.fixture
def server(backend: Backend, archives: dict[str, bytes]) -> Iterator[RegistryServer]:
    """A server over a registry that holds vision v1 and v2 (pushed beforehand: no torch)."""
    registry = Registry(backend.settings())
    try:
        push(registry, "vision", archives["conv"])
        push(registry, "vision", archives["linear_bn_train"])
    finally:
        registry.close()
    # the webhook commands subscribe a loopback URL, which an operator has to allow
    started = start_registry_server(backend, {"PT2SERDE_WEBHOOK_ALLOW_PRIVATE": "1"})
    try:
        yield started
    finally:
        stop_registry_server(started)


def _run(capsys: pytest.CaptureFixture[str], server: RegistryServer, *argv: str) -> Any:
    assert main([*argv, "--url", server.url, "--json"]) == EXIT_OK, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_registry_commands(server: RegistryServer, capsys: pytest.CaptureFixture[str]) -> None:
    (model,) = _run(capsys, server, "models")["models"]
    assert (model["name"], model["version_count"], model["latest_version"]) == ("vision", 2, 2)
    assert _run(capsys, server, "tag", "vision", "1", "stage=prod")["tags"] == {"stage": "prod"}
    _run(capsys, server, "tag", "vision", "2", "stage=dev")
    assert _run(capsys, server, "tag", "vision", "2", "stage", "--remove")["tags"] == {}
    alias = _run(capsys, server, "alias", "vision", "champion", "1", "--protect")
    assert (alias["version"], alias["protected"]) == (1, True)
    moved = _run(capsys, server, "alias", "vision", "champion", "2")
    assert (moved["version"], moved["protected"]) == (2, True)
    assert _run(capsys, server, "alias", "vision", "champion", "--unprotect")["protected"] is False
    _run(capsys, server, "alias", "vision", "staging", "1")
    _run(capsys, server, "alias", "vision", "staging", "--remove")

    diff = _run(capsys, server, "diff-versions", "vision", "1", "2")
    assert diff["summary"]["verdict"] != "identical"
    found = _run(capsys, server, "search", "--tag", "stage=prod")
    assert [(v["model"], v["version"]) for v in found] == [("vision", 1)]
    every = _run(capsys, server, "search", "--limit", "1", "--all", "--namespace", "aten")
    assert [v["version"] for v in every] == [2, 1]

    hook = _run(capsys, server, "webhook", "create", "http://127.0.0.1:9/h", "--model", "vision")
    assert hook["secret"].startswith("whsec_")
    listed = _run(capsys, server, "webhook", "list")
    assert [(h["id"], "secret" in h) for h in listed] == [(hook["id"], False)]
    assert _run(capsys, server, "webhook", "deliveries", hook["id"])["deliveries"] == []
    assert _run(capsys, server, "webhook", "delete", hook["id"]) == {"deleted": hook["id"]}

    assert main(["tag", "vision", "1", "stage", "--url", server.url]) == EXIT_USAGE
    assert main(["alias", "vision", "nobody", "--protect", "--url", server.url]) == EXIT_USAGE
    assert main(["webhook", "delete", "--url", server.url]) == EXIT_USAGE
    capsys.readouterr()
    assert main(["tag", "ghost", "1", "a=b", "--url", server.url]) == EXIT_INVALID
    assert "model-not-found" in capsys.readouterr().err
    refused = main(["delete", "vision", "2", "--reason", "x", "--url", server.url])
    assert refused == EXIT_INVALID
    assert "version-has-aliases" in capsys.readouterr().err
    gone = _run(capsys, server, "delete", "vision", "1", "--reason", "old")
    assert gone["deleted_reason"] == "old"
    assert main(["models", "--url", server.url]) == EXIT_OK
    assert "vision  1 live, newest v2  champion->v2" in capsys.readouterr().out
    detached = _run(capsys, server, "delete", "vision", "2", "--reason", "x", "--detach-aliases")
    assert detached["aliases"] == []
