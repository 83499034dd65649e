"""A pipeline written with `pt2serde.Client` against the real service: push programs torch
exported (in memory), alias, tag, pull and load them in torch, diff two versions, validate,
search, webhooks; the server's problems arrive as typed failures with their codes.

The client without a server (retries, routes, progress): tests/test_client.py.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import pt2serde
from tests.realzoo import tiny_hf_model
from tests.registry.conftest import (
    Backend,
    RegistryServer,
    rewrite_member,
    start_registry_server,
    stop_registry_server,
    warm,
)


class Scaled(torch.nn.Module):
    """A linear layer, then (in the second version) a ReLU."""

    def __init__(self, relu: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return torch.relu(y) if self.relu else y


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A registry server on SQLite (the backends are the HTTP tests' concern) that may post
    webhooks to loopback."""
    backend = Backend("sqlite", tmp_path_factory.mktemp("pipeline") / "data")
    server = start_registry_server(backend, {"PT2SERDE_WEBHOOK_ALLOW_PRIVATE": "1"})
    try:
        warm(server)
        yield server
    finally:
        stop_registry_server(server)


def _exported(relu: bool) -> tuple[torch.nn.Module, torch.export.ExportedProgram]:
    torch.manual_seed(0)
    module = Scaled(relu).eval()
    return module, torch.export.export(module, (torch.randn(2, 4),))


def test_a_pipeline_pushes_aliases_pulls_and_diffs(served: RegistryServer, tmp_path: Path) -> None:
    first_module, first = _exported(relu=False)
    second_module, second = _exported(relu=True)
    progress: list[tuple[int, int]] = []
    with pt2serde.Client(served.url) as registry:
        pushed = registry.push(
            "scaled", first, progress=lambda done, total: progress.append((done, total))
        )
        assert (pushed.created, pushed.version.version) == (True, 1)
        assert progress[-1][0] == progress[-1][1] > 0
        again = registry.push("scaled", first)
        assert (again.created, again.version.version) == (False, 1)
        v2 = registry.push("scaled", second).version
        assert v2.version == 2

        alias = registry.set_alias("scaled", "champion", 1)
        assert (alias.alias, alias.version, alias.protected) == ("champion", 1, False)
        registry.set_alias("scaled", "staging", 2)
        assert registry.aliases("scaled") == {"champion": 1, "staging": 2}
        tagged = registry.set_tag("scaled", "staging", "dataset", "v7")
        assert (tagged.version, tagged.tags) == (2, {"dataset": "v7"})

        pulled = registry.pull("scaled", tmp_path / "champion.pt2", ref="champion")
        data = (tmp_path / "champion.pt2").read_bytes()
        assert pulled.version == 1
        assert hashlib.sha256(data).hexdigest() == pulled.digests.archive
        # torch is the reference: what the registry serves loads and computes as the module
        loaded = torch.export.load(tmp_path / "champion.pt2").module()
        x = torch.randn(2, 4)
        torch.testing.assert_close(loaded(x), first_module(x), rtol=0, atol=0)
        registry.pull("scaled", tmp_path / "staging.pt2", ref="staging")
        loaded = torch.export.load(tmp_path / "staging.pt2").module()
        torch.testing.assert_close(loaded(x), second_module(x), rtol=0, atol=0)

        diff = registry.diff("scaled", "staging", "champion")
        assert diff.summary.verdict == "compatible"
        assert [n.target for n in diff.graph.added] == ["torch.ops.aten.relu.default"]
        assert diff.graph.removed == []
        assert registry.diff("scaled", 1, "scaled:champion").summary.verdict == "identical"

        report = registry.validate("scaled", 2)
        assert (report.valid, report.level) == (True, "semantic")
        assert [v.version for v in registry.versions("scaled")] == [1, 2]
        found = registry.search(model="scaled", tag=["dataset=v7"])
        assert [v.version for v in found.versions] == [2]

        hook = registry.create_webhook(
            "http://127.0.0.1:9/hook", model="scaled", events=["version.created"]
        )
        assert hook.secret
        assert [h.id for h in registry.webhooks("scaled")] == [hook.id]
        assert registry.deliveries(hook.id).deliveries == []
        registry.delete_webhook(hook.id)
        assert registry.webhooks("scaled") == []

        assert registry.delete_tag("scaled", 2, "dataset").tags == {}
        registry.delete_alias("scaled", "staging")
        assert registry.aliases("scaled") == {"champion": 1}


def test_problems_arrive_as_typed_failures(served: RegistryServer, tmp_path: Path) -> None:
    _, program = _exported(relu=False)
    with pt2serde.Client(served.url) as registry:
        with pytest.raises(pt2serde.NotFound) as missing:
            registry.version("nobody", 1)
        assert (missing.value.code, missing.value.status) == ("model-not-found", 404)

        registry.push("typed", program)
        registry.set_alias("typed", "champion", 1)
        with pytest.raises(pt2serde.Conflict) as aliased:
            registry.delete_version("typed", 1, "superseded")
        assert (aliased.value.code, aliased.value.status) == ("version-has-aliases", 409)
        assert "champion" in aliased.value.detail

        valid = tmp_path / "valid.pt2"
        registry.pull("typed", valid)
        broken = rewrite_member(
            valid.read_bytes(),
            "models/model.json",
            lambda b: b.replace(b"aten.linear.default", b"aten.linear_nope.default"),
        )
        with pytest.raises(pt2serde.InvalidProgram) as refused:
            registry.push("typed", broken)
        assert (refused.value.code, refused.value.status) == ("invalid-program", 422)
        assert [i.code for i in refused.value.issues] == ["operator-unknown"]
        assert refused.value.issues[0].path.startswith("/graph_module/graph/nodes/")


def test_a_pipeline_ships_a_fine_tuned_gpt2(served: RegistryServer, tmp_path: Path) -> None:
    """A real model through the client: a tiny GPT-2 (built from its config, offline) and a
    fine-tune of it that changed two tensors, pushed in memory, aliased, pulled, loaded by torch
    with the same outputs, and diffed: the diff names exactly the tensors training changed."""
    base = tiny_hf_model("gpt2").eval()
    ids = torch.randint(3, 100, (1, 8))
    first = torch.export.export(base, (), {"input_ids": ids}, strict=False)
    tuned = copy.deepcopy(base)
    with torch.no_grad():
        tuned.transformer.h[0].mlp.c_fc.weight.add_(0.01)
        tuned.transformer.ln_f.bias.add_(0.02)
    second = torch.export.export(tuned, (), {"input_ids": ids}, strict=False)
    with pt2serde.Client(served.url) as registry:
        registry.push("gpt2", first)
        registry.push("gpt2", second)
        registry.set_alias("gpt2", "production", 1)
        registry.set_alias("gpt2", "candidate", 2)
        for alias, module in (("production", base), ("candidate", tuned)):
            pulled = registry.pull("gpt2", tmp_path / f"{alias}.pt2", ref=alias)
            assert pulled.version == {"production": 1, "candidate": 2}[alias]
            loaded = torch.export.load(tmp_path / f"{alias}.pt2").module()
            torch.testing.assert_close(
                loaded(input_ids=ids).logits, module(input_ids=ids).logits, rtol=0, atol=0
            )
        diff = registry.diff("gpt2", "candidate", "production")
    assert diff.summary.verdict != "identical"
    assert sorted(p.name for p in diff.parameters) == [
        "transformer.h.0.mlp.c_fc.weight",
        "transformer.ln_f.bias",
    ]
    assert diff.graph.added == diff.graph.removed == []
