"""User pytree types without the user's library, and one torch path for validate and deserialize.

Programs whose inputs and outputs are a user namedtuple, a user dataclass or Hugging Face
`ModelOutput`s are exported here, where their types are registered; a worker of the pool, which
never imported the modules that define them, validates them at level torch and deserializes
them (with stand-ins); the archive it writes names the original types byte for byte, and
`torch.export.load` of it here gives the same outputs as the original program.
"""

from __future__ import annotations

import collections
import io
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

import schema
from app import operations as ops
from app.archive import open_archive
from app.bridge.checks import TORCH_NAMESPACE_MODULES
from app.bridge.exported import deserialize, serialize, torch_message
from app.bridge.standins import StandIn, StandInType, stand_ins, unknown_types
from app.failure import BridgeFailure
from app.jobs import documents as jobs
from app.jobs.torch import job_ping, job_torch_check
from app.programs.torch_check import TorchCheck
from app.settings import Settings
from app.tensors.sources import TensorSource
from app.workers.torch import TorchPool
from tests.bridge import pool_jobs
from tests.realzoo import VOCAB, tiny_hf_model
from tests.zoo import PROGRAM_NAMES, outputs_close

# ---------------------------------------------------------------- user types and programs

Pair = collections.namedtuple("Pair", ["total", "diff"])
#: A name the worker could import (this module), but never does.
PAIR_NAME = f"{__name__}.Pair"
pytree._register_namedtuple(Pair, serialized_type_name=PAIR_NAME)


@dataclass
class Scores:
    """A user dataclass output with a field left None."""

    best: torch.Tensor
    note: torch.Tensor | None
    rest: torch.Tensor


#: A name no process can import: the type is known only where this module registered it.
SCORES_NAME = "userlib_not_installed.outputs.Scores"
torch.export.register_dataclass(Scores, serialized_type_name=SCORES_NAME)

HF_OUTPUTS = (
    "transformers.modeling_outputs.BaseModelOutputWithPooling",
    "transformers.modeling_outputs.CausalLMOutputWithCrossAttentions",
)


class PairModule(torch.nn.Module):
    """Takes and returns a user namedtuple."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor([1.5, -0.5, 2.0]))

    def forward(self, pair: Pair) -> Pair:
        return Pair(pair.total * self.scale + pair.diff, pair.total - pair.diff)


class ScoresModule(torch.nn.Module):
    """Returns a user dataclass, one field None."""

    def forward(self, x: torch.Tensor) -> Scores:
        return Scores(best=x.amax(dim=-1), note=None, rest=x * 2)


@dataclass(frozen=True)
class Case:
    """An exported program, its inputs, and the user type names its treespecs carry."""

    ep: ExportedProgram
    args: tuple[Any, ...]
    names: tuple[str, ...]


def _pair() -> Case:
    args = (Pair(torch.randn(2, 3), torch.randn(2, 3)),)
    return Case(torch.export.export(PairModule(), args), args, (PAIR_NAME,))


def _scores() -> Case:
    args = (torch.randn(2, 5),)
    return Case(torch.export.export(ScoresModule(), args), args, (SCORES_NAME,))


def _vit() -> Case:
    model = tiny_hf_model("vit", layers=1)
    args = (torch.randn(1, 3, 16, 16),)
    return Case(torch.export.export(model, args), args, (HF_OUTPUTS[0],))


def _gpt2() -> Case:
    model = tiny_hf_model("gpt2")
    args = (torch.randint(0, VOCAB, (1, 8)),)
    return Case(torch.export.export(model, args), args, (HF_OUTPUTS[1],))


class Quantized(torch.nn.Module):
    """Quantize/dequantize pairs around a linear layer, as pt2e's convert writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops_ = torch.ops.quantized_decomposed

        def qdq(t: torch.Tensor, scale: float, zero: int) -> torch.Tensor:
            q = ops_.quantize_per_tensor.default(t, scale, zero, -128, 127, torch.int8)
            return ops_.dequantize_per_tensor.default(q, scale, zero, -128, 127, torch.int8)

        y = torch.nn.functional.linear(qdq(x, 0.05, 0), qdq(self.linear.weight, 0.01, 0))
        return qdq(y + self.linear.bias, 0.1, 3)


def _quantized() -> Case:
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

    args = (torch.randn(2, 4),)
    return Case(torch.export.export(Quantized(), args), args, ())


BUILDERS: dict[str, Callable[[], Case]] = {
    "namedtuple": _pair,
    "dataclass": _scores,
    "vit": _vit,
    "gpt2": _gpt2,
    "quantized": _quantized,
}
USER_TYPES = ("namedtuple", "dataclass", "vit", "gpt2")


@pytest.fixture(scope="module")
def cases() -> Iterator[dict[str, Case]]:
    """Every program, exported once, with the hub out of reach."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield {name: build() for name, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def pool() -> Iterator[TorchPool]:
    """One worker, never recycled: every job of this module runs in the same process."""
    settings = Settings(workers=1, job_timeout_s=300, worker_memory_mb=0, worker_max_jobs=0)
    with TorchPool(settings) as workers:
        yield workers


SETTINGS = Settings()


def _save(case: Case, path: Path) -> Path:
    torch.export.save(case.ep, path)
    return path


def _document(archive: Path) -> schema.ExportedProgram:
    with open_archive(archive, SETTINGS) as opened:
        [raw] = opened.documents.values()
    return schema.load(raw)


def _specs(doc: schema.ExportedProgram) -> list[tuple[str, str, str]]:
    return [
        (e.fqn, e.signature.in_spec, e.signature.out_spec)
        for e in doc.graph_module.module_call_graph
        if e.signature is not None
    ]


def _validate(path: Path, pool: TorchPool) -> ops.Report:
    with ops.open_source(path, "zip", SETTINGS) as source:
        return jobs.validate(source, SETTINGS, "torch", pool)


def _deserialize(path: Path, pool: TorchPool, target: Path) -> None:
    with ops.open_source(path, "zip", SETTINGS) as source:
        jobs.deserialize_to(source, SETTINGS, pool, target)


def _same_outputs(expected: Any, actual: Any) -> bool:
    leaves, spec = pytree.tree_flatten(expected)
    got, got_spec = pytree.tree_flatten(actual)
    return type(expected) is type(actual) and spec == got_spec and outputs_close(leaves, got)


# ---------------------------------------------------------------- through a worker


@pytest.mark.parametrize("name", USER_TYPES)
def test_user_types_load_in_a_worker_without_their_library(
    name: str, cases: dict[str, Case], pool: TorchPool, tmp_path: Path
) -> None:
    case = cases[name]
    source = _save(case, tmp_path / "in.pt2")
    # The worker has neither the defining modules nor the types registered.
    registered, imported = pool.submit(
        pool_jobs.pytree_knowledge, list(case.names), [__name__, "transformers"]
    )
    assert (registered, imported) == ([], [])

    report = _validate(source, pool)
    assert report.valid, report.findings
    assert [f for f in report.findings if f.severity == "error"] == []
    target = tmp_path / "out.pt2"
    _deserialize(source, pool, target)

    assert pool.submit(pool_jobs.pytree_knowledge, list(case.names), []) == ([], [])
    before, after = _document(source), _document(target)
    assert _specs(after) == _specs(before)
    assert after.graph_module.treespec_namedtuple_fields == (
        before.graph_module.treespec_namedtuple_fields
    )
    assert any(n in spec for n in case.names for _, i, o in _specs(after) for spec in (i, o))
    loaded = torch.export.load(target)
    assert _same_outputs(case.ep.module()(*case.args), loaded.module()(*case.args))


def test_one_worker_keeps_each_documents_own_namedtuple_fields(
    cases: dict[str, Case], pool: TorchPool, tmp_path: Path
) -> None:
    program = serialize(cases["namedtuple"].ep)
    data = program.doc.model_dump(mode="json")
    data["graph_module"]["treespec_namedtuple_fields"][PAIR_NAME]["field_names"] = ["a", "b"]
    other = schema.ExportedProgram.model_validate(data, strict=False)
    weights = tmp_path / "weights.safetensors"
    from app.tensors.safetensors_io import to_safetensors

    weights.write_bytes(to_safetensors(program.tensors.values()))
    tensors = TensorSource(safetensors=weights)
    pids = {pool.submit(job_ping)}
    seen = []
    for doc in (program.doc, other, program.doc):
        seen.append(pool.submit(pool_jobs.standin_fields, schema.dump(doc), tensors))
        check = pool.submit(job_torch_check, schema.dump(doc), tensors)
        assert TorchCheck.from_dict(check) == TorchCheck(torch=torch.__version__.split("+")[0])
        pids.add(pool.submit(job_ping))
    assert len(pids) == 1  # one process ran them all
    assert seen == [["total", "diff"], ["a", "b"], ["total", "diff"]]


# ---------------------------------------------------------------- one torch path


def _rewrite_document(archive: Path, change: Callable[[bytes], bytes], target: Path) -> Path:
    source = zipfile.ZipFile(archive)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as written:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("/models/model.json"):
                data = change(data)
            written.writestr(info.filename, data)
    target.write_bytes(out.getvalue())
    return target


def _deserialized(path: Path, pool: TorchPool, target: Path) -> str | None:
    """None when deserialize wrote the archive, else the message it failed with."""
    try:
        _deserialize(path, pool, target)
    except BridgeFailure as failure:
        assert not target.exists()
        return failure.message
    return None


def test_quantized_program_validates_exactly_when_it_deserializes(
    cases: dict[str, Case], pool: TorchPool, tmp_path: Path
) -> None:
    case = cases["quantized"]
    source = _save(case, tmp_path / "q.pt2")
    report = _validate(source, pool)
    assert report.valid
    assert _deserialized(source, pool, tmp_path / "out.pt2") is None
    loaded = torch.export.load(tmp_path / "out.pt2")
    assert _same_outputs(case.ep.module()(*case.args), loaded.module()(*case.args))

    # The same program naming a namespace nothing registers: neither accepts it, same words.
    renamed = _rewrite_document(
        source,
        lambda b: b.replace(b"quantized_decomposed", b"pt2serde_nowhere"),
        tmp_path / "renamed.pt2",
    )
    report = _validate(renamed, pool)
    assert not report.valid
    errors = [f for f in report.findings if f.severity == "error"]
    assert [f.code for f in errors] == ["op-namespace-unregistered"]
    assert "PT2SERDE_WORKER_IMPORTS" in errors[0].message
    assert __file__ in errors[0].message
    message = _deserialized(renamed, pool, tmp_path / "never.pt2")
    assert message is not None
    assert message == errors[0].message


def test_torch_namespace_modules_are_what_a_worker_lacks() -> None:
    """Every namespace of the table is missing from a fresh worker and registered by its module."""
    table = sorted(TORCH_NAMESPACE_MODULES)
    with TorchPool(Settings(workers=1, job_timeout_s=120, worker_memory_mb=0)) as fresh:
        before, after = fresh.submit(
            pool_jobs.namespaces_loaded, table, list(TORCH_NAMESPACE_MODULES.values())
        )
    assert (before, after) == ([], table)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_zoo_validates_exactly_when_it_deserializes(
    name: str, archives: dict[str, bytes], pool: TorchPool, tmp_path: Path
) -> None:
    """In a worker without the zoo's custom namespace: every program is accepted by both or,
    the custom op's, refused by both in the same words."""
    source = tmp_path / "in.pt2"
    source.write_bytes(archives[name])
    report = _validate(source, pool)
    message = _deserialized(source, pool, tmp_path / "out.pt2")
    assert report.valid == (message is None), (report.findings, message)
    assert report.valid == (name != "custom_op")
    if message is not None:
        assert [f.message for f in report.findings if f.severity == "error"] == [message]


# ---------------------------------------------------------------- stand-ins in this process


def _with_name(doc: schema.ExportedProgram, old: str, new: str) -> schema.ExportedProgram:
    return schema.load(schema.dump(doc).replace(old.encode(), new.encode()))


def test_stand_ins_are_registered_for_the_load_only(cases: dict[str, Case]) -> None:
    pair = _with_name(serialize(cases["namedtuple"].ep).doc, PAIR_NAME, "nowhere.Pair")
    scores = _with_name(serialize(cases["dataclass"].ep).doc, SCORES_NAME, "nowhere.Scores")
    assert unknown_types(pair) == [StandInType("nowhere.Pair", ("total", "diff"))]
    assert unknown_types(scores) == [StandInType("nowhere.Scores", None)]
    before = dict(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)
    with stand_ins(scores) as types:
        assert types == [StandInType("nowhere.Scores", None)]
        cls = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE["nowhere.Scores"]
        assert issubclass(cls, StandIn)
        [entry] = _specs(scores)
        spec = pytree.treespec_loads(entry[2])
        # The context stays the document's text, and is written back as it was.
        assert spec.context == '[["best", "rest"], ["note"]]'
        assert pytree.treespec_dumps(spec) == entry[2]
    assert pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE == before
    with pytest.raises(NotImplementedError, match="nowhere.Scores in pytree is not registered"):
        pytree.treespec_loads(entry[2])


def test_known_types_get_no_stand_in(cases: dict[str, Case]) -> None:
    program = serialize(cases["namedtuple"].ep)
    assert unknown_types(program.doc) == []
    built = deserialize(program.doc, program.tensors)
    signature = built.module_call_graph[0].signature
    assert signature is not None
    assert signature.out_spec.context is Pair


def test_namedtuple_fields_that_are_no_identifiers_still_load(cases: dict[str, Case]) -> None:
    program = serialize(cases["namedtuple"].ep)
    data = program.doc.model_dump(mode="json")
    data["graph_module"]["treespec_namedtuple_fields"][PAIR_NAME]["field_names"] = ["x y", "def"]
    odd = schema.ExportedProgram.model_validate(data, strict=False)
    doc = _with_name(odd, PAIR_NAME, "nowhere.Odd")
    built = deserialize(doc, program.tensors)
    signature = built.module_call_graph[0].signature
    assert signature is not None
    assert signature.out_spec.context._fields == ("_0", "_1")


def test_torch_messages_are_whole_with_their_cause_and_a_hint() -> None:
    long = "x" * 5000
    try:
        try:
            raise AttributeError("'_OpNamespace' 'nowhere' object has no attribute 'op'")
        except AttributeError as cause:
            raise RuntimeError(
                f"Failed deserializing node {long}\n Original exception Traceback (most recent"
            ) from cause
    except RuntimeError as exc:
        message = torch_message(exc)
    assert message == (
        f"Failed deserializing node {long}; caused by AttributeError: '_OpNamespace' 'nowhere' "
        "object has no attribute 'op' (hint: an operator namespace is missing from the worker: "
        "set PT2SERDE_WORKER_IMPORTS to the module that registers it)"
    )


def _rename_first_argument(raw: bytes) -> bytes:
    """The document with its first call's first named argument renamed to one no schema has
    (torch's loader drops such an argument and builds the program anyway)."""
    doc = schema.load(raw)
    node = next(n for n in doc.graph_module.graph.nodes if n.inputs)
    node.inputs[0].name = "not_an_argument"
    return schema.dump(doc)


def test_what_semantic_validation_refuses_deserialize_refuses_too(
    archives: dict[str, bytes], pool: TorchPool, tmp_path: Path
) -> None:
    source = tmp_path / "in.pt2"
    source.write_bytes(archives["conv"])
    mutant = _rewrite_document(source, _rename_first_argument, tmp_path / "mutant.pt2")
    report = _validate(mutant, pool)
    codes = [f.code for f in report.findings if f.severity == "error"]
    assert "argument-unknown" in codes
    with pytest.raises(ops.OperationFailure) as refused:
        _deserialize(mutant, pool, tmp_path / "never.pt2")
    assert refused.value.code == "invalid-program"
    assert [i.code for i in refused.value.issues] == codes
    assert not (tmp_path / "never.pt2").exists()
