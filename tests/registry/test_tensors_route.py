"""`GET .../tensors` through a real server says of each stored tensor what torch says of it:
dtype, shape, strides, offset, its storage's byte count and the sha256 of those bytes; the
digests are the ones the version's weights digest is built from. `GET .../tensors/stats` says
of each one's values what torch computes of them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from app.programs.digest import weights_digest
from tests.registry.conftest import (
    RegistryServer,
    make_backend,
    push_exported,
    start_registry_server,
    stop_registry_server,
    warm,
)


class Mixed(nn.Module):
    """Parameters and buffers of several dtypes and shapes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 8)
        self.scale = nn.Parameter(torch.randn(3, 5).to(torch.bfloat16))
        self.register_buffer("steps", torch.arange(7, dtype=torch.int64))
        odd = torch.tensor([[0.0, float("nan"), 2.5], [float("inf"), -4.0, 0.0]])
        self.register_buffer("odd", odd)
        self.register_buffer("flags", torch.tensor([True, False, True]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        extra = self.odd.nan_to_num().sum() + self.flags.sum()
        return self.fc(x) + self.scale.float().sum() + self.steps.sum() + extra


@pytest.fixture(scope="module")
def pushed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RegistryServer, dict[str, torch.Tensor]]]:
    backend = make_backend(request, tmp_path_factory.mktemp("tensors"), "sqlite")
    server = start_registry_server(backend, {"PT2SERDE_HTTP_WORKERS": "1"})
    try:
        warm(server)
        program = torch.export.export(Mixed(), (torch.randn(2, 16),))
        push_exported(server, "mixed", program)
        yield server, dict(program.state_dict)
    finally:
        stop_registry_server(server)


def test_each_tensor_as_torch_has_it(
    pushed: tuple[RegistryServer, dict[str, torch.Tensor]],
) -> None:
    server, state = pushed
    with server.client() as client:
        listed = client.get("/v1/models/mixed/versions/1/tensors")
        version = client.get("/v1/models/mixed/versions/1").json()
    assert listed.status_code == 200, listed.text
    entries = {e["name"]: e for e in listed.json()}
    assert sorted(entries) == sorted(state)
    for name, tensor in state.items():
        entry = entries[name]
        storage = bytes(tensor.detach().untyped_storage())
        assert entry["dtype"] == str(tensor.dtype).removeprefix("torch.")
        assert entry["shape"] == list(tensor.shape)
        assert entry["strides"] == list(tensor.stride())
        assert entry["storage_offset"] == tensor.storage_offset()
        assert entry["bytes"] == len(storage)
        assert entry["sha256"] == hashlib.sha256(storage).hexdigest()
    pairs = [(e["name"], e["digest"]) for e in entries.values()]
    assert weights_digest(pairs) == version["digests"]["weights"]


def test_tensor_stats_as_torch_computes_them(
    pushed: tuple[RegistryServer, dict[str, torch.Tensor]],
) -> None:
    server, state = pushed
    with server.client() as client:
        answer = client.get("/v1/models/mixed/versions/1/tensors/stats")
    assert answer.status_code == 200, answer.text
    entries = {e["name"]: e for e in answer.json()}
    assert sorted(entries) == sorted(state)
    for name, tensor in state.items():
        entry = entries[name]
        values = tensor.detach().double()
        finite = values[values.isfinite()]
        assert entry["numel"] == tensor.numel()
        assert entry["shape"] == list(tensor.shape)
        assert entry["zeros"] == int((values == 0).sum())
        assert entry["nans"] == int(values.isnan().sum())
        assert entry["infs"] == int(values.isinf().sum())
        assert entry["min"] == pytest.approx(float(finite.min()))
        assert entry["max"] == pytest.approx(float(finite.max()))
        assert entry["mean"] == pytest.approx(float(finite.mean()))
        assert entry["std"] == pytest.approx(float(finite.std()))
        assert entry["note"] is None
    assert entries["odd"]["nans"] == 1
    assert entries["odd"]["infs"] == 1
    assert entries["odd"]["zeros"] == 2
    assert entries["flags"]["mean"] == pytest.approx(2 / 3)


def test_tensor_stats_of_a_missing_version(
    pushed: tuple[RegistryServer, dict[str, torch.Tensor]],
) -> None:
    server, _ = pushed
    with server.client() as client:
        answer = client.get("/v1/models/mixed/versions/9/tensors/stats")
    assert answer.status_code == 404
    assert answer.json()["type"].endswith("/version-not-found")


def test_node_details_as_torch_has_the_node(
    pushed: tuple[RegistryServer, dict[str, torch.Tensor]],
) -> None:
    """`GET .../nodes/{graph}/{position}` of the linear node: its arguments with torch's shapes,
    its output, the module it ran in and the stack trace torch recorded; a node past the end
    is 404 node-not-found."""
    server, state = pushed
    program = torch.export.export(Mixed(), (torch.randn(2, 16),))
    [linear] = [n for n in program.graph.nodes if n.target is torch.ops.aten.linear.default]
    with server.client() as client:
        graph = client.get("/v1/models/mixed/versions/1/graph").json()
        position = graph["nodes"]["name"].index(linear.name)
        answer = client.get(f"/v1/models/mixed/versions/1/nodes/0/{position}")
        beyond = client.get(f"/v1/models/mixed/versions/1/nodes/0/{len(graph['nodes']['name'])}")
    assert answer.status_code == 200, answer.text
    node = answer.json()
    assert node["target"] == "torch.ops.aten.linear.default"
    shapes = [[(v["dtype"], v["shape"]) for v in a["values"]] for a in node["arguments"]]
    expected = [
        [(str(arg.meta["val"].dtype).removeprefix("torch."), str(list(arg.meta["val"].shape)))]
        for arg in linear.args
    ]
    assert shapes == expected
    assert node["outputs"][0]["shape"] == str(list(linear.meta["val"].shape))
    assert [m["path"] for m in node["module_stack"]] == ["fc"]
    assert node["module_stack"][0]["type"].endswith("Linear")
    assert node["stack_trace"] == linear.meta["stack_trace"]
    assert beyond.status_code == 404
    assert beyond.json()["type"].endswith("/node-not-found")
