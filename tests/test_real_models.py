"""Every program of the real zoo goes through every operation, and none is refused.

Tiny Hugging Face models and programs with the torch features real programs carry, exported in
this session: serialized, validated at every level, canonicalized (equal to torch's own
canonicalize), and deserialized by torch in a worker; torch.export.load of what we wrote gives the
original program's outputs on the same inputs. Through the library for every program, and
through the `pt2serde` command for one.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._sympy.numbers import int_oo

import schema
from app import operations as ops
from app.jobs import documents as jobs
from app.programs.expr_grammar import MAX_OPERANDS, TOKEN
from app.programs.findings import Level, Report
from app.settings import Settings
from app.workers.torch import TorchPool
from tests.conftest import ROOT
from tests.progs.test_canonical import our_canonical, torch_canonical, torch_stable
from tests.realzoo import (
    HF_PROGRAM_NAMES,
    REAL_PROGRAM_NAMES,
    WORKER_IMPORTS,
    RealProgram,
    same_outputs,
)
from tests.zoo import archive_bytes, torch_json

# Default settings but for the operator namespaces with kernels, which only a deployment can
# name: the zoo's custom op and torch's quantized_decomposed. Nothing names the zoo's user
# pytree types or transformers' ModelOutput classes: the service must do without them.
SETTINGS = Settings(worker_imports=WORKER_IMPORTS)
LEVELS: tuple[Level, ...] = ("schema", "semantic", "torch")
#: through the command too, one program (each command starts torch, and two start a worker):
#: the issue's first example, a decoder with the causal mask's `aten.__and__` and a ModelOutput.
CLI_PROGRAM = "gpt2"
PT2SERDE = Path(sys.executable).with_name("pt2serde")


@pytest.fixture(scope="session")
def real_archives(
    real_zoo: dict[str, RealProgram], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """torch.export.save's archive of every real-zoo program, as a file."""
    folder = tmp_path_factory.mktemp("realzoo")
    paths = {}
    for name, program in real_zoo.items():
        paths[name] = folder / f"{name}.pt2"
        paths[name].write_bytes(archive_bytes(program.ep))
    return paths


@pytest.fixture(scope="session")
def real_json(real_zoo: dict[str, RealProgram]) -> dict[str, bytes]:
    """torch's own JSON of every real-zoo program."""
    return {name: torch_json(program.ep) for name, program in real_zoo.items()}


@pytest.fixture(scope="session")
def real_pool() -> Iterator[TorchPool]:
    """One torch worker pool for every torch-level check and deserialize of this file."""
    with TorchPool(SETTINGS) as pool:
        yield pool


def _errors(report: Report) -> list[str]:
    return [f"{f.code} {f.path}: {f.message}" for f in report.findings if f.severity == "error"]


def _targets(program: RealProgram) -> set[str]:
    found = set()
    for module in program.ep.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            found.update(
                str(node.target) for node in module.graph.nodes if node.op == "call_function"
            )
    return found


def _check_loaded(path: Path, program: RealProgram) -> None:
    loaded = torch.export.load(path)
    # Outputs could agree by accident on tiny inputs; weights and constants must come back bit
    # for bit (the quantized program's int8 weights, GPT-2's tied embedding).
    for mine, theirs in (
        (loaded.state_dict, program.ep.state_dict),
        (loaded.constants, program.ep.constants),
    ):
        assert mine.keys() == theirs.keys()
        for fqn, tensor in theirs.items():
            assert isinstance(mine[fqn], torch.Tensor), fqn
            assert mine[fqn].dtype == tensor.dtype, fqn
            assert torch.equal(mine[fqn], tensor), fqn
    for args, kwargs in program.every_input():
        # each run gets its own copies: some programs write to their inputs
        ours = pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
        theirs = pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
        assert same_outputs(loaded.module()(*ours[0], **ours[1]), program.run_on(*theirs))


# ---------------------------------------------------------------- the zoo is what it claims


def test_zoo_has_the_programs_the_issue_names(
    real_zoo: dict[str, RealProgram], real_json: dict[str, bytes]
) -> None:
    from transformers.utils import ModelOutput

    assert set(real_zoo) == set(REAL_PROGRAM_NAMES)
    assert len(HF_PROGRAM_NAMES) >= 12
    for name in HF_PROGRAM_NAMES:
        assert issubclass(real_zoo[name].ep.call_spec.out_spec.type, ModelOutput), name
    dynamic = [n for n in HF_PROGRAM_NAMES if real_zoo[n].ep.range_constraints]
    assert len(dynamic) >= 2
    targets = set().union(*(_targets(p) for p in real_zoo.values()))
    assert {
        "aten.__and__.Tensor",
        "aten.__or__.Tensor",
        "aten.__xor__.Tensor",
        "aten.__rshift__.Scalar",
        "aten.__lshift__.Scalar",
        "aten.bitwise_and.Tensor",
        "aten.bitwise_not.default",
        "quantized_decomposed.quantize_per_tensor.tensor",
        "quantized_decomposed.dequantize_per_channel.default",
        "quantized_decomposed.choose_qparams.tensor",
        "pt2real.scaled_split.default",
    } <= targets
    assert {
        "cond",
        "while_loop",
        "map_impl",
        "scan",
        "auto_functionalized_v2",
        "wrap_with_set_grad_enabled",
        "wrap_with_autocast",
    } <= {t.rsplit(".", 1)[-1] for t in targets}
    assert b"pt2real.accumulate.default" in real_json["mutation"]
    assert b"torch._functorch.predispatch._add_batch_dim" in real_json["loops"]
    assert "aten.__and__.Tensor" in _targets(real_zoo["gpt2"])
    assert b"tests.realzoo.Pair" in real_json["namedtuple_io"]
    assert b"tests.realzoo.Box" in real_json["dataclass_io"]


def test_swin_style_sizes_are_long(real_json: dict[str, bytes]) -> None:
    # Sizes nested stage after stage repeat whole subterms in sympy's srepr form: more operand
    # tokens than the expression checker allows distinct operands, which it must still accept.
    texts = re.findall(rb'"expr_str": "([^"]+)"', real_json["windows"])
    longest = max(texts, key=len).decode()
    operands = [m for m in TOKEN.finditer(longest) if m.lastgroup in ("num", "name")]
    assert len(operands) > MAX_OPERANDS
    assert longest.count("Min(") > 8


def test_dynamic_programs_keep_their_ranges(real_zoo: dict[str, RealProgram]) -> None:
    for name in ("llama_dynamic", "bert_dynamic"):
        bounds = {
            (int(r.lower), int(r.upper)) for r in real_zoo[name].ep.range_constraints.values()
        }
        assert bounds == {(1, 8), (2, 32)}, name
    for name in ("dim_auto", "dim_dynamic"):
        ranges = real_zoo[name].ep.range_constraints
        assert len(ranges) == 3, name
        assert all(r.lower == 2 and r.upper == int_oo for r in ranges.values()), name


def test_sample_inputs_name_what_the_issue_saw(real_archives: dict[str, Path]) -> None:
    def sample_pickle(name: str) -> bytes:
        with zipfile.ZipFile(real_archives[name]) as outer:
            member = next(m for m in outer.namelist() if "/sample_inputs/" in m)
            with zipfile.ZipFile(io.BytesIO(outer.read(member))) as inner:
                return inner.read(next(m for m in inner.namelist() if m.endswith(".pkl")))

    assert b"_rebuild_from_type_v2" in sample_pickle("dim_dynamic")
    assert b"tests.realzoo" in sample_pickle("namedtuple_io")
    assert b"tests.realzoo" in sample_pickle("dataclass_io")


# ---------------------------------------------------------------- through the library


@pytest.mark.parametrize("name", REAL_PROGRAM_NAMES)
def test_serialize(
    name: str,
    real_zoo: dict[str, RealProgram],
    real_json: dict[str, bytes],
    real_archives: dict[str, Path],
) -> None:
    program = real_zoo[name]
    with ops.open_source(real_archives[name], "zip", SETTINGS) as source:
        result = ops.serialize(source, SETTINGS)
    assert list(result.documents) == ["model"]
    assert json.loads(schema.dump(result.documents["model"])) == json.loads(real_json[name])
    stored = {w.name: w for w in result.weights}
    expected = {**program.ep.state_dict, **program.ep.constants}
    assert set(stored) == set(expected)
    for fqn, tensor in expected.items():
        assert stored[fqn].shape == list(tensor.shape), fqn


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", REAL_PROGRAM_NAMES)
def test_validate(
    name: str, level: Level, real_archives: dict[str, Path], real_pool: TorchPool
) -> None:
    runner = real_pool if level == "torch" else None
    with ops.open_source(real_archives[name], "zip", SETTINGS) as source:
        report = jobs.validate(source, SETTINGS, level, runner)
    assert report.level == level
    assert _errors(report) == []
    assert report.valid


@pytest.mark.parametrize("name", REAL_PROGRAM_NAMES)
def test_canonical_equals_torchs(
    name: str, real_json: dict[str, bytes], real_archives: dict[str, Path]
) -> None:
    with ops.open_source(real_archives[name], "zip", SETTINGS) as source:
        canon = ops.canonical(source, SETTINGS)
    assert json.loads(canon.data) == torch_stable(real_json[name])
    assert our_canonical(real_json[name]) == torch_canonical(real_json[name])


@pytest.mark.parametrize("name", REAL_PROGRAM_NAMES)
def test_deserialize_loads_and_runs(
    name: str,
    real_zoo: dict[str, RealProgram],
    real_archives: dict[str, Path],
    real_pool: TorchPool,
    tmp_path: Path,
) -> None:
    target = tmp_path / "out.pt2"
    with ops.open_source(real_archives[name], "zip", SETTINGS) as source:
        jobs.deserialize_to(source, SETTINGS, real_pool, target)
        proven = ops.sample_inputs(source, SETTINGS).proven
    _check_loaded(target, real_zoo[name])
    # proven sample inputs are written, so the loaded module checks the program's guards
    loaded = torch.export.load(target)
    assert (loaded.example_inputs is not None) == bool(proven)
    assert hasattr(loaded.module(), "_guards_fn") == bool(proven)


def test_deserialized_programs_check_the_guards_torchs_own_load_checks(
    real_archives: dict[str, Path], real_pool: TorchPool, tmp_path: Path
) -> None:
    target = tmp_path / "out.pt2"
    with ops.open_source(real_archives["dim_auto"], "zip", SETTINGS) as source:
        jobs.deserialize_to(source, SETTINGS, real_pool, target)
    # the export's guard x.size()[1] == y.size()[0], broken
    mismatched = (torch.randn(3, 4), torch.randn(5, 6))
    for path in (real_archives["dim_auto"], target):
        with pytest.raises(AssertionError, match="Guard failed"):
            torch.export.load(path).module()(*mismatched)


# ---------------------------------------------------------------- through the command


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PT2SERDE_WORKER_IMPORTS": ",".join(WORKER_IMPORTS),
    }
    return subprocess.run(
        [str(PT2SERDE), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_command(
    real_zoo: dict[str, RealProgram],
    real_json: dict[str, bytes],
    real_archives: dict[str, Path],
    tmp_path: Path,
) -> None:
    program = real_zoo[CLI_PROGRAM]
    archive = str(real_archives[CLI_PROGRAM])
    ser = _cli("serialize", archive, "-o", "docs.json", cwd=tmp_path)
    assert ser.returncode == 0, ser.stderr
    docs = json.loads((tmp_path / "docs.json").read_bytes())
    assert docs["documents"]["model"] == json.loads(real_json[CLI_PROGRAM])
    for level in LEVELS:
        val = _cli("validate", archive, "--level", level, "--json", cwd=tmp_path)
        assert val.returncode == 0, (level, val.stdout, val.stderr)
        report = json.loads(val.stdout)
        assert report["valid"], level
        assert [f for f in report["findings"] if f["severity"] == "error"] == [], level
    can = _cli("canonicalize", archive, "-o", "canonical.json", cwd=tmp_path)
    assert can.returncode == 0, can.stderr
    canonical = json.loads((tmp_path / "canonical.json").read_bytes())
    assert canonical == torch_stable(real_json[CLI_PROGRAM])
    de = _cli("deserialize", archive, "-o", "out.pt2", cwd=tmp_path)
    assert de.returncode == 0, de.stderr
    _check_loaded(tmp_path / "out.pt2", program)
