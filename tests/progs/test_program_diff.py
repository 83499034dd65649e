"""The program diff on real exported programs: alignment, interface, weights, text."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import torch
from torch import nn
from torch.export import Dim, ExportedProgram

import schema
from app import operations as ops
from app.archive import RawTensor
from app.bridge.exported import storage_bytes, tensor_meta
from app.operations import open_source
from app.programs.diff import (
    ArgumentChange,
    InterfaceChange,
    ModuleChange,
    NodeRef,
    ProgramDiff,
    RangeChange,
    RawWeights,
    ValueStats,
    diff_programs,
    render_text,
)
from app.programs.diff.models import OutputMetaChange
from app.programs.diff.prepared import canonical_graph
from app.settings import Settings
from tests.progs import twin_a, twin_b
from tests.zoo import (
    PROGRAM_NAMES,
    ZooProgram,
    _run_decompositions,
    archive_bytes,
    torch_json,
)

SETTINGS = Settings()
X = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))


def _export(module: nn.Module, *args: Any, **kwargs: Any) -> ExportedProgram:
    return torch.export.export(module, args or (X,), strict=False, **kwargs)


def _diff_archives(old: bytes, new: bytes) -> ProgramDiff:
    with (
        open_source(old, "zip", SETTINGS) as a,
        open_source(new, "zip", SETTINGS) as b,
    ):
        return ops.program_diff(a, b, SETTINGS)


def _diff(old: ExportedProgram, new: ExportedProgram) -> ProgramDiff:
    return _diff_archives(archive_bytes(old), archive_bytes(new))


def _doc(ep: ExportedProgram) -> schema.ExportedProgram:
    return schema.load(torch_json(ep))


def _seeded(build: Any) -> Any:
    torch.manual_seed(0)
    return build()


def _assert_no_changes(diff: ProgramDiff) -> None:
    assert diff.graph.added == []
    assert diff.graph.removed == []
    assert diff.graph.changed == []
    assert diff.interface == []
    assert diff.range_constraints == []
    assert diff.opsets == []
    assert diff.modules == []
    assert diff.fields == []


# ---------------------------------------------------------------- identical


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_every_zoo_program_is_identical_to_itself(name: str, zoo: dict[str, ZooProgram]) -> None:
    data = archive_bytes(zoo[name].ep)
    diff = _diff_archives(data, data)
    assert diff.summary.verdict == "identical"
    assert diff.summary.weights_compared
    assert diff.summary.text == "identical: no differences"
    _assert_no_changes(diff)
    assert diff.parameters == diff.buffers == diff.constants == []
    assert diff.notes == []
    nodes = len(_doc(zoo[name].ep).graph_module.graph.nodes)
    assert diff.graph.unchanged == diff.graph.old_nodes == diff.graph.new_nodes == nodes


def test_twins_from_two_source_files_are_identical() -> None:
    a = _export(_seeded(twin_a.Twin))
    b = _export(_seeded(twin_b.Twin))
    # The documents really differ: stack traces name the files, module stacks the classes.
    assert b"twin_a.py" in torch_json(a)
    assert b"twin_b.py" in torch_json(b)
    diff = _diff(a, b)
    assert diff.summary.verdict == "identical"
    _assert_no_changes(diff)
    assert diff.parameters == diff.buffers == []


def test_a_bare_document_is_compared_without_values() -> None:
    wire = torch_json(_export(_seeded(twin_a.Twin)))
    with open_source(wire, "json", SETTINGS) as a, open_source(wire, "json", SETTINGS) as b:
        diff = ops.program_diff(a, b, SETTINGS)
    assert diff.summary.verdict == "identical"
    assert not diff.summary.weights_compared
    assert diff.summary.text == "identical: no differences (stored tensor values not compared)"
    assert diff.notes == ["stored tensor values were not compared: a side has no weights"]


# ---------------------------------------------------------------- weights


def test_one_changed_parameter_is_all_that_is_reported() -> None:
    module = _seeded(twin_a.Twin)
    before = archive_bytes(_export(module))
    old = module.linear.weight.detach().clone()
    with torch.no_grad():
        module.linear.weight[1, 2] += 0.5
    after = archive_bytes(_export(module))
    new = module.linear.weight.detach()
    delta = new.double() - old.double()

    diff = _diff_archives(before, after)
    assert diff.summary.verdict == "same-graph-new-weights"
    _assert_no_changes(diff)
    assert diff.buffers == diff.constants == []
    [change] = diff.parameters
    assert (change.name, change.kind, change.changes) == ("linear.weight", "parameter", ["value"])
    assert change.old_digest != change.new_digest
    assert change.stats is not None
    assert change.stats.numel == 12
    assert change.stats.differing == 1
    assert change.stats.max_abs_diff == delta.abs().max().item()
    assert change.stats.rel_norm == pytest.approx((delta.norm() / old.double().norm()).item())
    assert diff.summary.counts.weights_new_values == 1
    assert diff.summary.text == ("same-graph-new-weights: 1 tensor with new values (linear.weight)")


def _raw(name: str, tensor: torch.Tensor, kind: str = "buffer") -> RawTensor:
    return RawTensor(name, kind, tensor_meta(tensor), storage_bytes(tensor))  # type: ignore[arg-type]


def _state(ep: ExportedProgram) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in ep.state_dict.items()}


def _weights(tensors: dict[str, torch.Tensor], ep: ExportedProgram) -> RawWeights:
    params = {k for k, v in ep.state_dict.items() if isinstance(v, nn.Parameter)}
    return RawWeights(
        _raw(k, v, "parameter" if k in params else "buffer") for k, v in tensors.items()
    )


def test_value_statistics_cover_every_dtype_numpy_can_read(zoo: dict[str, ZooProgram]) -> None:
    ep = zoo["dtypes"].ep
    old = _state(ep)
    old["half"] = torch.ones(3, dtype=torch.float16)
    old["f8"] = torch.zeros(2, dtype=torch.float8_e4m3fn)
    new = {k: v.clone() for k, v in old.items()}
    new["weight"][0] += 1.0
    new["codes"][1] = 7
    new["mask"][0] = ~new["mask"][0]
    new["phase"][2] += 0.5j
    new["half"][1] = 1.5
    new["f8"][0] = 1.0

    doc = _doc(ep)
    diff = diff_programs(doc, doc, _weights(old, ep), _weights(new, ep))
    assert diff.summary.verdict == "same-graph-new-weights"
    found = {c.name: c for c in [*diff.parameters, *diff.buffers]}
    assert sorted(found) == ["codes", "f8", "half", "mask", "phase", "weight"]
    for name in ("weight", "codes", "mask", "phase", "half"):
        a = old[name].to(torch.complex128 if name == "phase" else torch.float64)
        b = new[name].to(a.dtype)
        delta = b - a
        stats = found[name].stats
        assert stats is not None, name
        assert found[name].changes == ["value"]
        assert stats.differing == int((a != b).sum())
        assert stats.max_abs_diff == delta.abs().max().item(), name
        assert stats.rel_norm == pytest.approx((delta.abs().norm() / a.abs().norm()).item())
    assert found["f8"].changes == ["value"]
    assert found["f8"].stats is None
    assert found["f8"].note == "numpy cannot read float8_e4m3fn; value statistics skipped"
    assert ProgramDiff.model_validate_json(diff.model_dump_json()) == diff


def test_nan_and_infinity_are_compared_elementwise() -> None:
    ep = _export(_seeded(twin_a.Twin))
    old = _state(ep)
    new = {k: v.clone() for k, v in old.items()}
    old["linear.bias"] = torch.tensor([float("nan"), 1.0, float("inf")])
    new["linear.bias"] = torch.tensor([float("nan"), 3.0, float("nan")])
    doc = _doc(ep)
    diff = diff_programs(doc, doc, _weights(old, ep), _weights(new, ep))
    [change] = diff.parameters
    assert change.stats == ValueStats(
        numel=3, differing=2, max_abs_diff=float("inf"), rel_norm=float("inf")
    )
    assert ProgramDiff.model_validate_json(diff.model_dump_json()) == diff


def test_equal_values_stored_another_way_are_a_layout_change() -> None:
    ep = _export(_seeded(twin_a.Twin))
    old = _state(ep)
    new = dict(old)
    new["linear.weight"] = old["linear.weight"].t().contiguous().t()
    assert new["linear.weight"].stride() != old["linear.weight"].stride()
    doc = _doc(ep)
    diff = diff_programs(doc, doc, _weights(old, ep), _weights(new, ep))
    [change] = diff.parameters
    assert change.changes == ["layout"]
    assert change.stats == ValueStats(numel=12, differing=0, max_abs_diff=0.0, rel_norm=0.0)
    assert diff.summary.verdict == "same-graph-new-weights"


def test_a_view_beyond_its_storage_is_not_read() -> None:
    ep = _export(_seeded(twin_a.Twin))
    doc = _doc(ep)
    good = _raw("linear.bias", torch.ones(3), "parameter")
    short = RawTensor("linear.bias", "parameter", good.meta, good.data[:8])
    diff = diff_programs(doc, doc, RawWeights([good]), RawWeights([short]))
    [change] = diff.parameters
    assert change.changes == ["value"]
    assert change.stats is None
    assert change.note == "linear.bias: the view needs 12 bytes, the storage has 8"


# ---------------------------------------------------------------- nodes


def test_an_added_layer_adds_its_nodes_and_parameters_only() -> None:
    two = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)))
    three = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)))
    diff = _diff(_export(two), _export(three))
    assert diff.summary.verdict == "compatible"
    assert diff.graph.added == [
        NodeRef(target="torch.ops.aten.linear.default", outputs=["linear_2"], position=2)
    ]
    assert diff.graph.removed == diff.graph.changed == []
    assert diff.graph.unchanged == 2
    assert [(p.name, p.changes, p.new_shape) for p in diff.parameters] == [
        ("2.weight", ["added"], [4, 4]),
        ("2.bias", ["added"], [4]),
    ]
    assert diff.interface == []
    assert diff.modules == [
        ModuleChange(path="2", change="added", new_type="torch.nn.modules.linear.Linear")
    ]


class _ConvNet(nn.Module):
    def __init__(self, relu: bool) -> None:
        super().__init__()
        self.relu = relu
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(x)
        if self.relu:
            y = torch.relu(y)
        y = torch.sigmoid(self.conv2(y) * 2)
        out: torch.Tensor = self.fc(torch.flatten(y, 1))
        return out


def test_a_relu_inserted_early_changes_no_other_node() -> None:
    image = torch.randn(2, 3, 8, 8)
    old = _run_decompositions(_export(_seeded(lambda: _ConvNet(False)), image))
    new = _run_decompositions(_export(_seeded(lambda: _ConvNet(True)), image))
    diff = _diff(old, new)
    assert [(n.target, n.outputs) for n in diff.graph.added] == [
        ("torch.ops.aten.relu.default", ["relu"])
    ]
    assert diff.graph.removed == diff.graph.changed == []
    assert diff.graph.unchanged == diff.graph.old_nodes == len(_doc(old).graph_module.graph.nodes)
    assert diff.parameters == diff.interface == []
    assert diff.summary.verdict == "compatible"


class _Residual(nn.Module):
    def __init__(self, extra: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.layer_norm(x @ self.w.t(), (4,))
        if self.extra:
            y = torch.tanh(y)
        return x + torch.nn.functional.gelu(y)


def test_an_insertion_that_moves_the_canonical_order_changes_no_other_node() -> None:
    def stack(extra_at: int) -> nn.Module:
        return nn.Sequential(*(_Residual(i == extra_at) for i in range(6)))

    old, new = _export(_seeded(lambda: stack(-1))), _export(_seeded(lambda: stack(2)))
    # Every weight-only ``t`` node is ready at once and "t" sorts before "tanh": torch's
    # canonical order runs all of them before the new tanh, not block by block as before.
    order = [n.target for n in canonical_graph(_doc(new)).nodes]
    weights_read = [i for i, target in enumerate(order) if target == "torch.ops.aten.t.default"]
    assert weights_read[-1] < order.index("torch.ops.aten.tanh.default")
    diff = _diff(old, new)
    assert [(n.target, n.outputs) for n in diff.graph.added] == [
        ("torch.ops.aten.tanh.default", ["tanh"])
    ]
    assert diff.graph.removed == diff.graph.changed == []
    assert diff.graph.unchanged == 30


def test_renamed_weights_are_recognised_by_their_digest() -> None:
    old = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)))
    new = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)))
    diff = _diff(_export(old), _export(new))
    assert [(p.name, p.changes, p.renamed_from) for p in diff.parameters] == [
        ("2.weight", ["renamed"], "1.weight"),
        ("2.bias", ["renamed"], "1.bias"),
    ]
    assert [(n.target, n.outputs) for n in diff.graph.added] == [
        ("torch.ops.aten.relu.default", ["relu"])
    ]
    assert diff.graph.removed == diff.graph.changed == []
    # the Linear moved from 1 to 2 with its weights; the ReLU at 1 is the new module
    assert diff.modules == [
        ModuleChange(path="1", change="added", new_type="torch.nn.modules.activation.ReLU"),
        ModuleChange(
            path="2",
            change="moved",
            old_path="1",
            old_type="torch.nn.modules.linear.Linear",
            new_type="torch.nn.modules.linear.Linear",
        ),
    ]


class _Blocks(nn.Module):
    """A list of linear+relu blocks; `insert_at` puts one more (other weights) at that index."""

    def __init__(self, blocks: int, insert_at: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        made = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(blocks)]
        if insert_at is not None:
            torch.manual_seed(5)
            made.insert(insert_at, nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
        self.layers = nn.ModuleList(made)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return x


def test_an_inserted_block_is_a_new_module_and_the_later_ones_moved() -> None:
    """A block inserted at index 3 of 6 is the new module `layers.3` with its own two nodes
    (not the last block's nodes, nor later blocks "changed" by their shifted weights); the
    blocks after it moved one index up, their weights renamed with them."""
    diff = _diff(_export(_Blocks(6)), _export(_Blocks(6, insert_at=3)))
    new_graph = _export(_Blocks(6, insert_at=3)).graph_module.graph
    inserted = [
        n.name
        for n in new_graph.nodes
        if n.op == "call_function"
        and list(n.meta["nn_module_stack"].values())[-1][0].startswith("layers.3")
    ]
    assert sorted(o for n in diff.graph.added for o in n.outputs) == sorted(inserted)
    assert diff.graph.removed == diff.graph.changed == []
    added = [m.path for m in diff.modules if m.change == "added"]
    assert added == ["layers.3", "layers.3.0", "layers.3.1"]
    moved = [(m.old_path, m.path) for m in diff.modules if m.change == "moved"]
    assert moved == [("layers.3", "layers.4"), ("layers.4", "layers.5"), ("layers.5", "layers.6")]
    changes = {p.name: (p.changes, p.renamed_from) for p in diff.parameters}
    assert changes["layers.3.0.weight"] == (["added"], None)
    assert changes["layers.4.0.weight"] == (["renamed"], "layers.3.0.weight")
    assert changes["layers.6.0.bias"] == (["renamed"], "layers.5.0.bias")
    assert "layers.0.0.weight" not in changes


class _Scaled(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.k).sin() + x


def test_a_changed_literal_changes_that_node_only() -> None:
    diff = _diff(_export(_Scaled(2)), _export(_Scaled(3)))
    [change] = diff.graph.changed
    assert (change.old.target, change.old.outputs) == ("torch.ops.aten.mul.Tensor", ["mul"])
    assert change.arguments == [ArgumentChange(position=1, name="other", old="2", new="3")]
    assert change.outputs == change.subgraphs == []
    assert not change.target_changed
    assert diff.graph.added == diff.graph.removed == []
    assert diff.graph.unchanged == 2
    assert diff.summary.verdict == "compatible"


class _Total(nn.Module):
    def __init__(self, dims: tuple[int, ...] | None) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        return y.sum() if self.dims is None else y.sum(dim=self.dims)


def test_another_overload_of_an_operator_is_a_changed_node() -> None:
    diff = _diff(_export(_Total(None)), _export(_Total((0, 1))))
    [change] = diff.graph.changed
    assert change.target_changed
    assert (change.old.target, change.new.target) == (
        "torch.ops.aten.sum.default",
        "torch.ops.aten.sum.dim_IntList",
    )
    assert change.arguments == [ArgumentChange(position=1, name="dim", old=None, new="[0, 1]")]
    assert diff.graph.added == diff.graph.removed == []
    assert diff.interface == []


class _Cond(nn.Module):
    def __init__(self, shift: float) -> None:
        super().__init__()
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def true_fn(t: torch.Tensor) -> torch.Tensor:
            return t.sin()

        def false_fn(t: torch.Tensor) -> torch.Tensor:
            return t.cos() - self.shift

        out: torch.Tensor = torch.cond(x.sum() > 0, true_fn, false_fn, (x,))
        return out


def test_a_changed_branch_is_diffed_inside_its_subgraph() -> None:
    diff = _diff(_export(_Cond(1.0)), _export(_Cond(2.0)))
    [change] = diff.graph.changed
    assert change.new.target == "torch.ops.higher_order.cond"
    assert change.arguments == []
    [sub] = change.subgraphs
    assert (sub.name, sub.unchanged, sub.added, sub.removed) == ("false_graph_0", 1, [], [])
    [inner] = sub.changed
    assert inner.new.target == "torch.ops.aten.sub.Tensor"
    assert inner.arguments == [ArgumentChange(position=1, name="other", old="1.0", new="2.0")]
    assert diff.graph.unchanged == 2


# ---------------------------------------------------------------- interface


def test_more_output_features_break_callers() -> None:
    four = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)))
    five = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 5)))
    diff = _diff(_export(four), _export(five))
    assert diff.summary.verdict == "breaking"
    assert diff.interface == [
        InterfaceChange(
            side="output",
            change="shape",
            name="output 0",
            old="float32[2, 4]",
            new="float32[2, 5]",
            breaking=True,
            detail="output 0: dim 1 4 -> 5",
        )
    ]
    assert [(p.name, p.changes, p.old_shape, p.new_shape) for p in diff.parameters] == [
        ("2.weight", ["shape"], [4, 4], [5, 4]),
        ("2.bias", ["shape"], [4], [5]),
    ]
    [change] = diff.graph.changed
    assert change.arguments == []
    assert change.outputs == [
        OutputMetaChange(position=0, old="float32[2, 4]", new="float32[2, 5]")
    ]
    assert render_text(diff) == (
        "breaking: 1 breaking interface change; nodes: 0 added, 0 removed, 1 changed; "
        "weights: 0 added, 0 removed, 2 changed\n"
        "interface (1 change, 1 breaking):\n"
        "  ! output 0: dim 1 4 -> 5\n"
        "      float32[2, 4] -> float32[2, 5]\n"
        "nodes: 3 -> 3 (0 added, 0 removed, 1 changed, 2 unchanged)\n"
        "  ~ torch.ops.aten.linear.default: linear_1 -> linear_1\n"
        "      output 0: float32[2, 4] -> float32[2, 5]\n"
        "parameters:\n"
        "  ~ 2.weight: shape float32[4, 4] -> float32[5, 4]\n"
        "  ~ 2.bias: shape float32[4] -> float32[5]\n"
    )


class _Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _dynamic(high: int) -> ExportedProgram:
    shapes = {"x": {0: Dim("batch", min=2, max=high)}}
    return _export(_Double(), torch.randn(5, 3), dynamic_shapes=shapes)


def test_a_narrower_dynamic_range_breaks_callers() -> None:
    old, new = _dynamic(64), _dynamic(32)
    [sym] = [str(s) for s in old.range_constraints]
    diff = _diff(old, new)
    assert diff.summary.verdict == "breaking"
    assert diff.interface == [
        InterfaceChange(
            side="input",
            change="dynamic-range",
            name="x",
            old=f"float32[{sym}:2..64, 3]",
            new=f"float32[{sym}:2..32, 3]",
            breaking=True,
            detail="input 'x': dim 0 (x.shape[0]) range 2..64 -> 2..32 narrowed",
        ),
        InterfaceChange(
            side="output",
            change="dynamic-range",
            name="output 0",
            old=f"float32[{sym}:2..64, 3]",
            new=f"float32[{sym}:2..32, 3]",
            breaking=False,
            detail="output 0: dim 0 (x.shape[0]) range 2..64 -> 2..32 narrowed",
        ),
    ]
    assert diff.range_constraints == [
        RangeChange(
            symbol="x.shape[0]",
            change="changed",
            old_name=sym,
            new_name=sym,
            old="2..64",
            new="2..32",
        )
    ]
    assert diff.graph.changed == []


def test_a_wider_dynamic_range_keeps_callers_working() -> None:
    diff = _diff(_dynamic(32), _dynamic(64))
    assert diff.summary.verdict == "compatible"
    assert [(c.side, c.change, c.breaking) for c in diff.interface] == [
        ("input", "dynamic-range", False),
        ("output", "dynamic-range", False),
    ]


class _Pair(nn.Module):
    def __init__(self, both: bool) -> None:
        super().__init__()
        self.both = both

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.sin()
        return (y, x.cos()) if self.both else (y,)


def test_a_removed_output_breaks_callers() -> None:
    diff = _diff(_export(_Pair(True)), _export(_Pair(False)))
    assert diff.summary.verdict == "breaking"
    assert diff.interface == [
        InterfaceChange(
            side="output",
            change="removed",
            name="output 1",
            old="float32[2, 4]",
            breaking=True,
            detail="output 1 (float32[2, 4]) was removed",
        ),
        InterfaceChange(
            side="output",
            change="structure",
            name="outputs",
            breaking=True,
            detail="the pytree structure of the outputs changed",
        ),
    ]
    assert [(n.target, n.outputs) for n in diff.graph.removed] == [
        ("torch.ops.aten.cos.default", ["cos"])
    ]
    assert diff.graph.added == diff.graph.changed == []


class _Renamed(nn.Module):
    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return inp * 2


def test_a_renamed_input_breaks_keyword_callers_and_nothing_else() -> None:
    diff = _diff(_export(_Double()), _export(_Renamed()))
    assert diff.interface == [
        InterfaceChange(
            side="input",
            change="renamed",
            name="inp",
            old="x",
            new="inp",
            breaking=True,
            detail="input 0 is now called 'inp' instead of 'x'",
        )
    ]
    assert diff.graph.added == diff.graph.removed == diff.graph.changed == []
    assert diff.graph.unchanged == 1


def test_a_renamed_dynamic_input_keeps_its_symbols() -> None:
    old = _dynamic(64)
    shapes = {"inp": {0: Dim("batch", min=2, max=64)}}
    new = _export(_Renamed(), torch.randn(5, 3), dynamic_shapes=shapes)
    diff = _diff(old, new)
    assert [(c.change, c.name) for c in diff.interface] == [("renamed", "inp")]
    assert diff.range_constraints == []
    assert diff.graph.added == diff.graph.removed == diff.graph.changed == []


class _Sum(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 + y


def test_an_added_input_breaks_callers() -> None:
    diff = _diff(_export(_Double()), _export(_Sum(), X, X.clone()))
    assert diff.interface == [
        InterfaceChange(
            side="input",
            change="added",
            name="y",
            new="float32[2, 4]",
            breaking=True,
            detail="input 'y' (float32[2, 4]) was added",
        ),
        InterfaceChange(
            side="input",
            change="structure",
            name="inputs",
            breaking=True,
            detail="the pytree structure of the inputs changed",
        ),
    ]
    assert [(n.target, n.outputs) for n in diff.graph.added] == [
        ("torch.ops.aten.add.Tensor", ["add"])
    ]
    assert diff.graph.removed == diff.graph.changed == []


# ---------------------------------------------------------------- size


class _Flat(nn.Module):
    """Five nodes per step, no submodules: a long graph that exports quickly."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.steps):
            x = x + (torch.sigmoid(x * self.w) + i).sin()
        return x


def _renamed(value: Any, table: dict[str, str]) -> Any:
    """`value` with every ``{"name": v}`` reference renamed through `table`."""
    if isinstance(value, dict):
        if value.keys() == {"name"}:
            return {"name": table.get(value["name"], value["name"])}
        return {k: _renamed(v, table) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, table) for v in value]
    return value


def _repeated(wire: bytes, times: int) -> bytes:
    """The document of a one-input, one-output program chained `times` times with itself.

    Exporting 2,000 nodes takes torch over ten seconds; chaining copies of a real exported
    block makes the same document shape in milliseconds.
    """
    data = orjson.loads(wire)
    gm = data["graph_module"]
    graph = gm["graph"]
    [user] = [s["user_input"]["arg"] for s in gm["signature"]["input_specs"] if "user_input" in s]
    [output] = gm["signature"]["output_specs"]
    first, last = user["as_tensor"]["name"], output["user_output"]["arg"]["as_tensor"]["name"]
    block = list(graph["nodes"])
    defined = [o["as_tensor"]["name"] for n in block for o in n["outputs"]]
    values = graph["tensor_values"]
    previous = last
    for copy_index in range(1, times):
        table = {v: f"{v}_r{copy_index}" for v in defined}
        table[first] = previous
        for node in block:
            renamed = _renamed(node, table)
            renamed["name"] = table[node["name"]]
            graph["nodes"].append(renamed)
        values.update({table[v]: values[v] for v in defined})
        previous = table[last]
    graph["outputs"] = [{"as_tensor": {"name": previous}}]
    output["user_output"]["arg"]["as_tensor"]["name"] = previous
    return orjson.dumps(data)


def _insert_relu(wire: bytes, after: str) -> bytes:
    """The document with a relu reading `after` inserted, and every later use of it rewired."""
    data = orjson.loads(wire)
    graph = data["graph_module"]["graph"]
    nodes = graph["nodes"]
    at = next(i for i, n in enumerate(nodes) if n["outputs"] == [{"as_tensor": {"name": after}}])
    relu = {
        "target": "torch.ops.aten.relu.default",
        "inputs": [{"name": "self", "arg": {"as_tensor": {"name": after}}, "kind": 1}],
        "outputs": [{"as_tensor": {"name": "inserted"}}],
        "metadata": {},
        "is_hop_single_tensor_return": None,
        "name": "inserted",
    }
    later = _renamed(nodes[at + 1 :], {after: "inserted"})
    graph["nodes"] = [*nodes[: at + 1], relu, *later]
    graph["tensor_values"]["inserted"] = graph["tensor_values"][after]
    return orjson.dumps(data)


@pytest.fixture(scope="module")
def long_program() -> bytes:
    """A 2,000-node document: ten chained copies of a real 200-node export."""
    return _repeated(torch_json(_export(_seeded(lambda: _Flat(40)))), 10)


def test_two_thousand_nodes_align_with_one_insertion(long_program: bytes) -> None:
    old = schema.load(long_program)
    new = schema.load(_insert_relu(long_program, "sigmoid_3"))
    assert len(old.graph_module.graph.nodes) == 2000
    diff = diff_programs(old, new)
    assert diff.graph.added == [
        NodeRef(target="torch.ops.aten.relu.default", outputs=["inserted"], position=17)
    ]
    assert diff.graph.removed == diff.graph.changed == []
    assert diff.graph.unchanged == 2000
    assert diff.summary.verdict == "compatible"
    same = diff_programs(old, schema.load(long_program))
    assert same.summary.verdict == "identical"
    assert same.graph.unchanged == 2000
