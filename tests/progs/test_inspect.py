"""Inspection views against torch as the oracle: unflatten, the capability partitioner, graphs."""

from __future__ import annotations

import functools
import io
import itertools
import operator
import random
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn
from torch._export.serde import serialize as torch_serde
from torch.export import ExportedProgram
from torch.export.unflatten import InterpreterModule, InterpreterModuleDispatcher
from torch.fx.node import _get_qualified_name
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

import schema
from app.programs.inspect import (
    INPUT,
    OUTPUT,
    InspectFailure,
    ModuleTree,
    WeightInfo,
    WeightKind,
    module_graph,
    module_tree,
    operators,
    partitions,
    stage_graph,
    stages,
    weights,
)
from schema.models import ExportedProgram as Document
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes, torch_json

_LEAFSPEC = re.escape("`isinstance(treespec, LeafSpec)` is deprecated")
_GET_ATTR = re.escape("Attempted to insert a get_attr Node with no underlying reference")


@contextmanager
def _torch_quirks() -> Iterator[None]:
    with warnings.catch_warnings():
        # torch 2.13 deep-copies module call graphs (tripping its own LeafSpec deprecation) and
        # unflatten inserts get_attr nodes for pytree specs before registering them; both are
        # torch-internal and harmless to what these tests compare.
        warnings.filterwarnings("ignore", message=_LEAFSPEC, category=FutureWarning)
        warnings.filterwarnings("ignore", message=_GET_ATTR, category=UserWarning)
        yield


def _doc(ep: ExportedProgram) -> Document:
    return schema.load(torch_json(ep))


@pytest.fixture(scope="module")
def docs(zoo_json: dict[str, bytes]) -> dict[str, Document]:
    return {name: schema.load(data) for name, data in zoo_json.items()}


def _export(module: nn.Module, *args: torch.Tensor) -> ExportedProgram:
    return torch.export.export(module, args, strict=False)


# ---------------------------------------------------------------- module tree


def _unflattened_type(module: nn.Module) -> str | None:
    if isinstance(module, InterpreterModuleDispatcher):
        first = module._call_modules[0]
        return first.type_name() if isinstance(first, InterpreterModule) else None
    type_name = getattr(module, "type_name", None)
    return type_name() if callable(type_name) else None


def _tally(tensors: Iterator[torch.Tensor]) -> tuple[int, int, int]:
    items = list(tensors)
    return (
        len(items),
        sum(t.numel() for t in items),
        sum(t.numel() * t.element_size() for t in items),
    )


def _assert_tree_matches_unflatten(tree: ModuleTree, ep: ExportedProgram) -> None:
    with _torch_quirks():
        unflat = torch.export.unflatten(ep)
    found = dict(unflat.named_modules(remove_duplicate=False))
    # unflatten attaches subgraphs in set order (it varies with the hash seed); modules in order.
    assert {m.path for m in tree.modules} == set(found)
    assert [m.path for m in tree.modules if m.kind == "module"] == [
        path for path, module in found.items() if not isinstance(module, torch.fx.GraphModule)
    ]
    for info in tree.modules:
        path, module = info.path, found[info.path]
        if info.calls:
            assert info.type == _unflattened_type(module), path
        else:
            # Never called: the document cannot know the class; unflatten makes it a plain
            # module, or (for a container of called modules) reuses a child's class.
            assert info.type is None, path
        params = info.total_parameters
        assert (params.count, params.numel, params.nbytes) == _tally(module.parameters()), path
        bufs = info.total_buffers
        assert (bufs.count, bufs.numel, bufs.nbytes) == _tally(module.buffers()), path


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_module_tree_matches_unflatten(
    name: str, zoo: dict[str, ZooProgram], docs: dict[str, Document]
) -> None:
    _assert_tree_matches_unflatten(module_tree(docs[name]), zoo[name].ep)


@pytest.mark.parametrize("name", ["shared_sub", "preserve_sig_shared"])
def test_a_module_called_twice_has_two_calls(name: str, docs: dict[str, Document]) -> None:
    tree = module_tree(docs[name])
    sub, linear = tree.module("sub"), tree.module("sub.linear")
    assert (sub.calls, sub.call_names, sub.nodes, sub.total_nodes) == (2, ["sub", "sub@1"], 2, 4)
    assert (linear.calls, linear.nodes, linear.type) == (2, 2, "torch.nn.modules.linear.Linear")
    assert sub.total_parameters.numel == 4 * 4 + 4
    assert tree.module("").total_nodes == 4


def test_preserved_signatures_are_the_module_call_graph(
    zoo: dict[str, ZooProgram], docs: dict[str, Document]
) -> None:
    tree = module_tree(docs["preserve_sig_shared"])
    expected = {
        entry.fqn: entry.signature
        for entry in zoo["preserve_sig_shared"].ep.module_call_graph
        if entry.signature is not None and entry.fqn
    }
    got = {sig.call: sig for sig in tree.module("sub").signatures}
    assert set(got) == set(expected) == {"sub", "sub@1"}
    for call, sig in expected.items():
        assert got[call].inputs == [getattr(a, "name", None) for a in sig.inputs]
        assert got[call].outputs == [getattr(a, "name", None) for a in sig.outputs]
        assert got[call].in_spec == torch.utils._pytree.treespec_dumps(sig.in_spec)
        assert got[call].out_spec == torch.utils._pytree.treespec_dumps(sig.out_spec)
    assert tree.module("").signatures[0].forward_arg_names == ["x", "y"]


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.seq(x) + x
        return out


class _Stacked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Block() for _ in range(3)])
        self.unused = nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(4))
        self.gain = nn.Parameter(torch.randn(4, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:2]:
            x = layer(x)
        out: torch.Tensor = self.layers[2](x) * self.scale * self.gain
        return out


def _manifest(ep: ExportedProgram) -> list[WeightInfo]:
    dtypes = torch_serde._TORCH_TO_SERIALIZE_DTYPE
    out: list[WeightInfo] = []
    for name, tensor in ep.state_dict.items():
        kind: WeightKind = "parameter" if isinstance(tensor, nn.Parameter) else "buffer"
        out.append(
            WeightInfo(
                name,
                kind,
                schema.ScalarType(dtypes[tensor.dtype].value),
                tuple(tensor.shape),
                tensor.numel() * tensor.element_size(),
            )
        )
    return out


def test_module_tree_of_nested_containers() -> None:
    torch.manual_seed(0)
    ep = _export(_Stacked(), torch.randn(2, 4))
    doc = _doc(ep)
    tree = module_tree(doc)
    _assert_tree_matches_unflatten(tree, ep)
    assert (tree.module("layers").type, tree.module("layers").calls) == (None, 0)
    assert (tree.module("unused").calls, tree.module("unused").total_parameters.numel) == (0, 6)
    assert tree.module("layers.1.seq.0").type == "torch.nn.modules.linear.Linear"
    assert tree.module("layers.2").nodes == 1
    assert tree.module("layers.2").total_nodes == 3
    assert tree.module("").total_parameters.nbytes == (3 * (16 + 4) + 6) * 4 + 4 * 8


def test_module_tree_takes_sizes_and_extra_weights_from_the_manifest() -> None:
    torch.manual_seed(0)
    ep = _export(_Stacked(), torch.randn(2, 4))
    manifest = [
        WeightInfo(w.name, w.kind, w.dtype, w.shape, 1000) if w.name == "gain" else w
        for w in _manifest(ep)
    ]
    manifest.append(WeightInfo("head.proj.weight", "parameter", schema.ScalarType.HALF, (3,), 6))
    tree = module_tree(_doc(ep), manifest)
    assert tree.module("").parameters.nbytes == 1000
    head = tree.module("head.proj")
    assert (head.parent, head.type, head.parameters.nbytes) == ("head", None, 6)
    assert tree.module("").total_parameters.nbytes == (3 * (16 + 4) + 6) * 4 + 1000 + 6


# ---------------------------------------------------------------- module graph and stages


@pytest.mark.parametrize("name", ["conv", "linear_bn_train", "preserve_sig", "shared_sub"])
def test_top_level_vertices_follow_unflatten_calls(
    name: str, zoo: dict[str, ZooProgram], docs: dict[str, Document]
) -> None:
    with _torch_quirks():
        unflat = torch.export.unflatten(zoo[name].ep)
    called = [n.target for n in unflat.graph.nodes if n.op == "call_module"]
    graph = module_graph(docs[name], 1)
    mine = [v.call for v in graph.vertices if v.kind == "module" and v.module]
    assert [c.split("@")[0] for c in mine if c is not None] == called


def test_conv_is_a_chain_of_modules(docs: dict[str, Document]) -> None:
    graph = module_graph(docs["conv"], 1)
    assert [(v.id, v.kind, v.nodes, v.param_bytes) for v in graph.vertices] == [
        (INPUT, "input", 0, 0),
        ("conv", "module", 1, (4 * 3 * 3 * 3 + 4) * 4),
        ("<root>#0", "ops", 1, 0),
        ("pool", "module", 1, 0),
        ("<root>#1", "ops", 1, 0),
        ("fc", "module", 1, (5 * 64 + 5) * 4),
        (OUTPUT, "output", 0, 0),
    ]
    assert [(e.source, e.target, e.values) for e in graph.edges] == [
        (INPUT, "conv", ["x"]),
        ("conv", "<root>#0", ["conv2d"]),
        ("<root>#0", "pool", ["relu"]),
        ("pool", "<root>#1", ["max_pool2d"]),
        ("<root>#1", "fc", ["flatten"]),
        ("fc", OUTPUT, ["linear"]),
    ]
    assert graph.is_chain
    assert all(v.outputs_used == 1 for v in graph.vertices if v.kind != "output")
    whole = module_graph(docs["conv"], 0)
    assert [v.id for v in whole.vertices] == [INPUT, "<root>", OUTPUT]
    assert whole.vertices[1].nodes == 5


def test_a_skip_input_breaks_the_chain(docs: dict[str, Document]) -> None:
    graph = module_graph(docs["preserve_sig"], 1)
    assert not graph.is_chain
    assert (INPUT, "sub", ["y"]) in [(e.source, e.target, e.values) for e in graph.edges]
    deep = module_graph(docs["preserve_sig"], 2)
    assert [v.id for v in deep.vertices] == [
        INPUT,
        "<root>#0",
        "sub.linear",
        "sub",
        "<root>#1",
        OUTPUT,
    ]


def _best_split(costs: list[int], k: int) -> int:
    best = None
    for cuts in itertools.combinations(range(1, len(costs)), k - 1):
        bounds = [0, *cuts, len(costs)]
        worst = max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds))
        best = worst if best is None else min(best, worst)
    assert best is not None
    return best


@pytest.fixture(scope="module")
def stacked() -> Document:
    torch.manual_seed(0)
    return _doc(_export(_Stacked(), torch.randn(2, 4)))


@pytest.mark.parametrize("by", ["param_bytes", "nodes"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_stages_are_balanced_and_contiguous(by: str, k: int, stacked: Document) -> None:
    doc = stacked
    split_graph = stage_graph(doc, k, by)  # type: ignore[arg-type]
    units = [v for v in split_graph.vertices if v.kind in ("module", "ops")]
    costs = [v.param_bytes if by == "param_bytes" else v.nodes for v in units]
    split = stages(doc, k, by=by)  # type: ignore[arg-type]
    assert len(split) == k
    assert [vid for s in split for vid in s.vertices] == [v.id for v in units]
    assert all(s.vertices for s in split)
    assert max(s.cost for s in split) == _best_split(costs, k)
    assert split[0].inputs == ["x"]
    for before, after in itertools.pairwise(split):
        assert before.outputs == after.inputs


def test_stage_and_depth_failures(docs: dict[str, Document]) -> None:
    units = len([v for v in module_graph(docs["conv"], 1).vertices if v.kind != "input"]) - 1
    for k in (0, units + 1):
        with pytest.raises(InspectFailure) as info:
            stages(docs["conv"], k)
        assert info.value.code == "invalid-stage-count"
    with pytest.raises(InspectFailure) as info:
        stages(docs["conv"], 2, by="flops")  # type: ignore[arg-type]
    assert info.value.code == "invalid-stage-cost"
    with pytest.raises(InspectFailure) as info:
        module_graph(docs["conv"], -1)
    assert info.value.code == "invalid-depth"


# ---------------------------------------------------------------- partitions


class _Support(OperatorSupportBase):
    """Supports call_function nodes whose qualified target or namespace is listed."""

    def __init__(self, supported: set[str]) -> None:
        self.supported = supported

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        name = _get_qualified_name(node.target)  # type: ignore[arg-type]
        namespace = name.split(".")[2] if name.startswith("torch.ops.") else name.rsplit(".", 1)[0]
        return name in self.supported or namespace in self.supported


@functools.cache
def _reloaded(name: str) -> ExportedProgram:
    from tests.zoo import cached_zoo

    with _torch_quirks():
        return torch.export.load(io.BytesIO(archive_bytes(cached_zoo()[name].ep)))


def _torch_partitions(
    ep: ExportedProgram, supported: set[str], single: bool
) -> list[tuple[set[str], set[str], set[str]]]:
    gm = ep.graph_module
    found = CapabilityBasedPartitioner(
        gm, _Support(supported), allows_single_node_partition=single
    ).propose_partitions()
    out = []
    for part in found:
        nodes = set(part.nodes)
        inputs = {i.name for n in nodes for i in n.all_input_nodes if i not in nodes}
        outputs = {n.name for n in nodes if any(u not in nodes for u in n.users)}
        out.append(({n.name for n in nodes}, inputs, outputs))
    return out


def _assert_same_partitions(doc: Document, ep: ExportedProgram, supported: set[str]) -> None:
    for single in (False, True):
        expected = _torch_partitions(ep, supported, single)
        got = partitions(doc, supported, allow_single_node=single)
        assert sorted((sorted(n), sorted(i), sorted(o)) for n, i, o in expected) == sorted(
            (sorted(p.nodes), sorted(p.inputs), sorted(p.outputs)) for p in got
        ), (supported, single)


_SUPPORT_SETS: dict[str, list[set[str]]] = {
    "conv": [
        {"aten"},
        {"torch.ops.aten.conv2d.default", "torch.ops.aten.relu.default"},
        {
            "torch.ops.aten.conv2d.default",
            "torch.ops.aten.max_pool2d.default",
            "torch.ops.aten.linear.default",
        },
        {"torch.ops.aten.relu.default", "torch.ops.aten.flatten.using_ints"},
    ],
    "dynamic": [
        {"aten"},
        # mul -> add -> sum with add unsupported: mul and sum must not merge.
        {
            "torch.ops.aten.mul.Tensor",
            "torch.ops.aten.sum.dim_IntList",
            "torch.ops.aten.sub.Tensor",
        },
        {"torch.ops.aten.mean.default", "torch.ops.aten.sub.Tensor", "torch.ops.aten.add.Tensor"},
    ],
    "multi_out": [
        {"aten"},
        {"aten", "_operator"},
        {"torch.ops.aten.topk.default", "_operator.getitem", "torch.ops.aten.mul.Tensor"},
        {"_operator", "torch.ops.aten.add.Tensor", "torch.ops.aten.mul.Tensor"},
    ],
    "decomposed": [
        {"aten"},
        {
            "torch.ops.aten.convolution.default",
            "torch.ops.aten.relu.default",
            "torch.ops.aten.addmm.default",
            "torch.ops.aten.permute.default",
        },
        {
            "torch.ops.aten.max_pool2d_with_indices.default",
            "_operator",
            "torch.ops.aten.view.default",
        },
    ],
    "cond": [
        {"aten"},
        {"aten", "higher_order"},
        {"torch.ops.higher_order.cond", "torch.ops.aten.gt.Scalar"},
    ],
    "linear_bn_train": [{"aten"}, {"aten", "_operator"}],
    "symint_out": [{"aten", "_operator"}, {"_operator.mul", "torch.ops.aten.sym_size.int"}],
}


@pytest.mark.parametrize(
    ("name", "index"), [(n, i) for n, sets in _SUPPORT_SETS.items() for i in range(len(sets))]
)
def test_partitions_match_capability_partitioner(
    name: str, index: int, docs: dict[str, Document]
) -> None:
    _assert_same_partitions(docs[name], _reloaded(name), _SUPPORT_SETS[name][index])


class _Detour(nn.Module):
    """A -> B -> C and A -> C, with B unsupported: A and C may not fuse."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.relu() * 2
        b = a.sin()
        return (a + b).exp()


def test_partitions_never_fuse_around_an_unsupported_node() -> None:
    ep = _export(_Detour(), torch.randn(3))
    doc = _doc(ep)
    supported = {f"torch.ops.aten.{op}" for op in ("relu.default", "mul.Tensor", "add.Tensor")}
    supported.add("torch.ops.aten.exp.default")
    got = [set(p.nodes) for p in partitions(doc, supported)]
    assert got == [{"relu", "mul"}, {"add", "exp"}]
    first = partitions(doc, supported)[0]
    assert (first.inputs, first.outputs) == (["x"], ["mul"])
    _assert_same_partitions(doc, ep, supported)


def test_supported_targets_may_be_written_short(docs: dict[str, Document]) -> None:
    full = partitions(docs["dynamic"], {"torch.ops.aten.mul.Tensor", "torch.ops.aten.add.Tensor"})
    assert [p.nodes for p in full] == [["mul", "add"]]
    for short in ({"aten.mul.Tensor", "aten.add"}, {"torch.ops.aten.mul", "aten.add.Tensor"}):
        assert partitions(docs["dynamic"], short) == full


class _Tangle(nn.Module):
    """Branches, residuals and multi-output ops for randomized partition checks."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(12, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.a(x).relu()
        values, indices = torch.topk(h, 2, dim=1)
        s1, s2 = torch.split(h, [3, 3], dim=1)
        g = torch.sigmoid(s1) * s2.tanh()
        r = self.b(torch.cat([g, s1 - s2, g.neg(), s2], dim=1)) + h
        m = r.mean(dim=1, keepdim=True)
        out = (r - m).abs().exp() + values.sum()
        side = torch.cat([s1.sin(), s2.cos()], dim=1) * m
        return out, indices, side + g.sum()


def test_partitions_match_on_random_support_sets() -> None:
    torch.manual_seed(0)
    ep = _export(_Tangle(), torch.randn(4, 6))
    doc = _doc(ep)
    targets = sorted(
        {_get_qualified_name(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    )
    rng = random.Random(0)
    for _ in range(40):
        supported = set(rng.sample(targets, rng.randint(1, len(targets))))
        _assert_same_partitions(doc, ep, supported)


_UNARY = (torch.relu, torch.sin, torch.cos, torch.exp, torch.tanh, torch.neg, torch.abs, torch.erf)
_BINARY = (torch.add, torch.mul, torch.sub, torch.maximum, torch.atan2)


class _RandomDag(nn.Module):
    """A seeded random DAG of unary and binary ops over three inputs."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[Any, ...]:
        rng = random.Random(self.seed)
        pool = [x, y, z]
        for _ in range(rng.randint(6, 16)):
            if rng.random() < 0.5:
                pool.append(rng.choice(_UNARY)(rng.choice(pool)))
            else:
                pool.append(rng.choice(_BINARY)(rng.choice(pool), rng.choice(pool)))
        return tuple(pool[-4:])


@pytest.mark.parametrize("seed", range(6))
def test_partitions_match_on_random_graphs(seed: int) -> None:
    ep = _export(_RandomDag(seed), torch.randn(2), torch.randn(2), torch.randn(2))
    doc = _doc(ep)
    targets = sorted(
        {_get_qualified_name(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    )
    rng = random.Random(seed)
    for _ in range(10):
        _assert_same_partitions(doc, ep, {t for t in targets if rng.random() < 0.6})


def test_partitions_reject_undefined_values(docs: dict[str, Document]) -> None:
    doc = docs["conv"].model_copy(deep=True)
    doc.graph_module.graph.nodes[1].inputs[0].arg.as_tensor.name = "ghost"  # type: ignore[union-attr]
    with pytest.raises(InspectFailure) as info:
        partitions(doc, {"aten"})
    assert info.value.code == "undefined-value"
    assert [(i.code, i.path) for i in info.value.issues] == [
        ("undefined-value", "/graph_module/graph/nodes/1")
    ]


# ---------------------------------------------------------------- operators


def _histogram(gm: torch.fx.GraphModule) -> Counter[str]:
    return Counter(
        _get_qualified_name(n.target)
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is not operator.getitem
    )


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_operator_histogram_matches_graph(
    name: str, zoo: dict[str, ZooProgram], docs: dict[str, Document]
) -> None:
    gm = zoo[name].ep.graph_module
    stats = operators(docs[name])
    assert stats.graph.by_target == dict(_histogram(gm))
    subgraphs = {n.target: getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    assert set(stats.subgraphs) == set(subgraphs)
    total = _histogram(gm)
    for path, sub in subgraphs.items():
        assert stats.subgraphs[path].by_target == dict(_histogram(sub))
        total += _histogram(sub)
    assert stats.total.by_target == dict(total)
    namespaces = Counter(
        t.split(".")[2] if t.startswith("torch.ops.") else t.rsplit(".", 1)[0]
        for t in total.elements()
    )
    assert stats.total.by_namespace == dict(namespaces)
    assert stats.custom_namespaces == (["pt2zoo"] if name == "custom_op" else [])


# ---------------------------------------------------------------- weights


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_weights_match_state_dict_and_constants(
    name: str, zoo: dict[str, ZooProgram], docs: dict[str, Document]
) -> None:
    ep = zoo[name].ep
    tensors = {**ep.state_dict, **ep.constants}
    stats = weights(docs[name])
    signature = ep.graph_signature
    assert [(t.name, t.kind) for t in stats.tensors] == [
        (s.target, {"PARAMETER": "parameter", "BUFFER": "buffer"}.get(s.kind.name, "constant"))
        for s in signature.input_specs
        if s.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")
    ]
    for entry in stats.tensors:
        tensor = tensors[entry.name]
        assert f"torch.{entry.dtype}" == str(tensor.dtype)
        assert entry.shape == list(tensor.shape)
        assert entry.nbytes == tensor.numel() * tensor.element_size()
    assert stats.total.nbytes == sum(
        tensors[t.name].numel() * tensors[t.name].element_size() for t in stats.tensors
    )
    assert stats.by_kind.get("parameter", stats.total.model_copy(update={"count": 0})).count == len(
        signature.parameters
    )
    assert (stats.not_in_manifest, stats.not_in_signature, stats.quantized) == ([], [], [])


def test_weights_prefer_the_manifest(zoo: dict[str, ZooProgram], docs: dict[str, Document]) -> None:
    ep = zoo["conv"].ep
    manifest = [w for w in _manifest(ep) if w.name != "fc.bias"]
    manifest[0] = WeightInfo(manifest[0].name, "parameter", manifest[0].dtype, manifest[0].shape, 1)
    manifest.append(WeightInfo("extra.table", "buffer", schema.ScalarType.HALF, (2, 3), 12))
    stats = weights(docs["conv"], manifest)
    assert stats.not_in_manifest == ["fc.bias"]
    assert stats.not_in_signature == ["extra.table"]
    assert stats.tensors[0].nbytes == 1
    assert stats.by_dtype["float16"].nbytes == 12
    assert stats.total.nbytes == 1 + 4 * 4 + 5 * 64 * 4 + 5 * 4 + 12


class _QuantLinear(nn.Module):
    """A pt2e-style quantized linear spelled out with quantized_decomposed operators."""

    out_scale: torch.Tensor
    out_zp: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w_int8", torch.randint(-127, 127, (8, 4), dtype=torch.int8))
        self.register_buffer("w_scales", torch.rand(8) / 10 + 0.01)
        self.register_buffer("w_zero_points", torch.zeros(8, dtype=torch.int64))
        self.bias = nn.Parameter(torch.randn(8))
        self.out_scale = torch.tensor([0.1])
        self.out_zp = torch.tensor([0], dtype=torch.int64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        xq = qd.quantize_per_tensor.default(x, 0.05, 3, -128, 127, torch.int8)
        xd = qd.dequantize_per_tensor.default(xq, 0.05, 3, -128, 127, torch.int8)
        w = qd.dequantize_per_channel.default(
            self.w_int8, self.w_scales, self.w_zero_points, 0, -127, 127, torch.int8
        )
        y = nn.functional.linear(xd, w, self.bias)
        yq = qd.quantize_per_tensor.tensor(y, self.out_scale, self.out_zp, -128, 127, torch.int8)
        out: torch.Tensor = qd.dequantize_per_tensor.tensor(
            yq, self.out_scale, self.out_zp, -128, 127, torch.int8
        )
        return out


def test_quantized_weights_report_the_graph_parameters() -> None:
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

    torch.manual_seed(0)
    ep = _export(_QuantLinear(), torch.randn(2, 4))
    doc = _doc(ep)
    stats = weights(doc)
    nodes = [
        n
        for n in ep.graph.nodes
        if n.op == "call_function" and n.target.namespace == "quantized_decomposed"
    ]
    assert [q.node for q in stats.quantized] == [n.name for n in nodes]
    bound = (
        ep.graph_signature.inputs_to_buffers | ep.graph_signature.inputs_to_lifted_tensor_constants
    )
    for q, node in zip(stats.quantized, nodes, strict=True):
        args = dict(zip((a.name for a in node.target._schema.arguments), node.args, strict=False))
        scale = args.get("scale", args.get("scales"))
        zero = args.get("zero_point", args.get("zero_points"))
        if isinstance(scale, torch.fx.Node):
            assert q.scale is None
            ref = q.tensors["scale" if "scale" in args else "scales"]
            assert (ref.value, ref.weight) == (scale.name, bound.get(scale.name))
        else:
            assert q.scale == scale
        if isinstance(zero, torch.fx.Node):
            assert q.zero_point is None
        else:
            assert q.zero_point == zero
        assert (q.quant_min, q.quant_max) == (args["quant_min"], args["quant_max"])
        assert f"torch.{q.dtype}" == str(args["dtype"])
        assert q.axis == args.get("axis")
        assert q.input.value == node.args[0].name
    assert [(q.op, q.scheme, q.symmetric) for q in stats.quantized] == [
        ("quantize", "per_tensor", False),
        ("dequantize", "per_tensor", False),
        ("dequantize", "per_channel", None),
        ("quantize", "per_tensor", None),
        ("dequantize", "per_tensor", None),
    ]
    weight = stats.quantized[2]
    assert (weight.input.weight, weight.tensors["scales"].weight) == ("w_int8", "w_scales")
    assert stats.by_dtype["int8"].nbytes == 8 * 4
    assert operators(doc).custom_namespaces == ["quantized_decomposed"]
    assert operators(doc).providers == {
        "quantized_decomposed": "torch.ao.quantization.fx._decomposed"
    }


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_views_are_plain_json(name: str, docs: dict[str, Document]) -> None:
    doc = docs[name]
    views = [module_tree(doc), module_graph(doc, 1), operators(doc), weights(doc)]
    views += [*partitions(doc, {"aten"}, allow_single_node=True), *stages(doc, 1)]
    for view in views:
        assert type(view).model_validate_json(view.model_dump_json()) == view


# ---------------------------------------------------------------- bad metadata


def test_unreadable_module_stack_is_a_coded_failure(docs: dict[str, Document]) -> None:
    doc = docs["conv"].model_copy(deep=True)
    doc.graph_module.graph.nodes[2].metadata["nn_module_stack"] = "L__self__,,M;broken"
    with pytest.raises(InspectFailure) as info:
        module_tree(doc)
    assert info.value.code == "bad-module-stack"
    assert [(i.code, i.path) for i in info.value.issues] == [
        ("bad-module-stack", "/graph_module/graph/nodes/2/metadata/nn_module_stack")
    ]


def test_module_stack_commas_inside_brackets_belong_to_the_path(docs: dict[str, Document]) -> None:
    doc = docs["conv"].model_copy(deep=True)
    doc.graph_module.graph.nodes[1].metadata["nn_module_stack"] = (
        "L__self__,,M;L__self__blocks,blocks[slice(0, 2, None)],torch.nn.Sequential"
    )
    tree = module_tree(doc)
    assert tree.module("blocks[slice(0, 2, None)]").type == "torch.nn.Sequential"


def test_weight_info_from_meta(docs: dict[str, Document]) -> None:
    meta = docs["conv"].graph_module.graph.tensor_values["p_fc_weight"]
    info = WeightInfo.from_meta("fc.weight", "parameter", meta, 1280)
    assert info == WeightInfo("fc.weight", "parameter", schema.ScalarType.FLOAT, (5, 64), 1280)
    unhinted = schema.TensorMeta.model_validate(
        meta.model_dump() | {"sizes": [{"as_expr": {"expr_str": "s0", "hint": None}}]}
    )
    with pytest.raises(InspectFailure) as info_error:
        WeightInfo.from_meta("x", "buffer", unhinted, 0)
    assert info_error.value.code == "unknown-shape"
