"""A new user's first hour with the CLI on real programs: the zoo and a
tiny Hugging Face BERT."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import torch
from torch import nn

from app.cli import main
from tests.api.conftest import Server, start_server, stop_server
from tests.realzoo import VOCAB, tiny_hf_model
from tests.zoo import ZooProgram, archive_bytes, outputs_close, torch_json

#: The upload limit of this file's server: one zoo archive fits, two together do not.
UPLOAD_LIMIT = 20_000


@dataclass
class Ran:
    """What one run of the command did."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, cwd: Path, umask: int = 0o022) -> Ran:
    """`pt2serde ARGS` run in this process (a subprocess would spend seconds importing)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.StringIO()
    here, mask = Path.cwd(), os.umask(umask)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:
                code = int(exit_.code or 0)
    finally:
        os.chdir(here)
        os.umask(mask)
    out.flush()
    buffer = out.buffer
    assert isinstance(buffer, io.BytesIO)
    return Ran(code, buffer.getvalue().decode(), err.getvalue())


def _bert() -> tuple[torch.export.ExportedProgram, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = tiny_hf_model("bert")
    ids = torch.randint(0, VOCAB, (1, 8))
    return torch.export.export(model, (ids,)), model, ids


class _Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


class _Wrapped(nn.Module):
    """Everything inside one top-level module, as model wrappers have it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = _Body()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        return out


@pytest.fixture(scope="module")
def bert() -> tuple[torch.export.ExportedProgram, nn.Module, torch.Tensor]:
    return _bert()


@pytest.fixture(scope="module")
def files(
    zoo: dict[str, ZooProgram],
    bert: tuple[torch.export.ExportedProgram, nn.Module, torch.Tensor],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    folder = tmp_path_factory.mktemp("first-hour")
    for name in ("conv", "cond", "dynamic"):
        (folder / f"{name}.pt2").write_bytes(archive_bytes(zoo[name].ep))
    (folder / "conv.json").write_bytes(torch_json(zoo["conv"].ep))
    (folder / "bert.pt2").write_bytes(archive_bytes(bert[0]))
    torch.manual_seed(0)
    wrapped = torch.export.export(_Wrapped(), (torch.randn(2, 8),))
    (folder / "wrapped.pt2").write_bytes(archive_bytes(wrapped))
    (folder / "junk.pt2").write_bytes(b"PK\x03\x04 this is not a zip")
    return folder


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = start_server(
        {
            "PT2SERDE_WORKERS": "1",
            "PT2SERDE_HTTP_WORKERS": "1",
            "PT2SERDE_MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT),
        }
    )
    try:
        yield running
    finally:
        stop_server(running)


def _json(result: Ran) -> Any:
    return orjson.loads(result.stdout)


def test_3_what_serialize_writes_the_next_command_reads(
    files: Path, zoo: dict[str, ZooProgram]
) -> None:
    ser = cli("serialize", "conv.pt2", "-o", "bundle.json", "--weights", "w.st", cwd=files)
    assert ser.returncode == 0, ser.stderr
    assert set(orjson.loads((files / "bundle.json").read_bytes())) == {"documents", "weights"}
    plain = cli("canonicalize", "conv.pt2", "--json", cwd=files)
    for command in ("canonicalize", "hash"):
        from_bundle = cli(command, "bundle.json", "--json", "--model", "model", cwd=files)
        assert from_bundle.returncode == 0, from_bundle.stderr
        assert _json(from_bundle)["digests"]["graph"] == _json(plain)["digests"]["graph"]
    valid = cli("validate", "bundle.json", "--level", "semantic", "--json", cwd=files)
    assert _json(valid)["valid"], valid.stdout
    modules = cli("inspect", "bundle.json", "--json", cwd=files)
    assert [m["path"] for m in _json(modules)["modules"]] == ["", "conv", "pool", "fc"]
    diff = cli("diff", "bundle.json", "conv.pt2", "--json", cwd=files)
    assert _json(diff)["summary"]["verdict"] == "identical", diff.stdout
    unknown = cli("validate", "bundle.json", "--model", "other", cwd=files)
    assert (unknown.returncode, unknown.stderr.split(":")[1].strip()) == (1, "unknown-model")


def test_3_deserialize_reads_the_bundle(files: Path, zoo: dict[str, ZooProgram]) -> None:
    cli("serialize", "conv.pt2", "-o", "conv-bundle.json", "--weights", "c.st", cwd=files)
    de = cli("deserialize", "conv-bundle.json", "--weights", "c.st", "-o", "back.pt2", cwd=files)
    assert de.returncode == 0, de.stderr
    # written by our own CLI from a program this test exported
    loaded = torch.export.load(io.BytesIO((files / "back.pt2").read_bytes()))
    assert outputs_close(loaded.module()(*zoo["conv"].args), zoo["conv"].run())


def test_3_http_validate_reads_the_bundle(files: Path, server: Server) -> None:
    cli("serialize", "conv.pt2", "-o", "http-bundle.json", cwd=files)
    with server.client() as client:
        answer = client.post(
            "/v1/validate",
            params={"level": "semantic"},
            content=(files / "http-bundle.json").read_bytes(),
            headers={"Content-Type": "application/json"},
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["valid"], answer.json()


def test_4_failures_keep_their_details(files: Path) -> None:
    cli("serialize", "bert.pt2", "-o", "bert.json", cwd=files)
    text = cli("deserialize", "bert.json", "-o", "never.pt2", cwd=files)
    assert text.returncode == 1
    first, *listed = text.stderr.splitlines()
    assert first.startswith("pt2serde: weights-missing: no weights given")
    assert listed[0] == "  weight-missing  /  parameter 'embeddings.word_embeddings.weight'"
    assert listed[-1] == "  ... and 36 more (--json lists them all)"
    as_json = cli("deserialize", "bert.json", "-o", "never.pt2", "--json", cwd=files)
    problem = _json(as_json)
    assert (problem["code"], len(problem["errors"])) == ("weights-missing", 41)
    assert problem["errors"][-1]["message"] == "buffer 'embeddings.token_type_ids'"
    junk = _json(cli("validate", "junk.pt2", "--json", cwd=files))
    assert junk["code"].startswith("archive-")
    assert not (files / "never.pt2").exists()


def test_5_progress_everywhere_and_for_transfers(files: Path, server: Server) -> None:
    for args in (
        ("schema", "versions"),
        ("schema", "describe", "8.20"),
        ("schema", "diff", "8.15", "8.20"),
        ("versions", "nothing-here", "--url", server.url),
        ("diff", "conv.pt2", "conv.pt2"),
    ):
        result = cli(*args, "--progress", cwd=files)
        assert result.returncode in (0, 1), result.stderr
        assert "usage error" not in result.stderr
    assert "] done" in result.stderr
    quiet = cli("push", "progress-model", "conv.pt2", "--url", server.url, cwd=files)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    size = (files / "conv.pt2").stat().st_size
    pushed = cli("push", "progress-model", "conv.pt2", "--url", server.url, "--progress", cwd=files)
    assert pushed.returncode == 0, pushed.stderr
    assert f"] sent {size / 1e6:.1f} of {size / 1e6:.1f} MB (100%)" in pushed.stderr
    onto = ("push", "progress-model", "conv.pt2", "--url", server.url, "--parent")
    assert cli(*onto, "1", cwd=files).returncode == 0
    orphan = cli(*onto, "9", cwd=files)
    assert orphan.returncode != 0
    assert "version-not-found" in orphan.stderr, orphan.stderr
    pulled = cli("pull", "progress-model", "got.pt2", "--url", server.url, "--progress", cwd=files)
    assert pulled.returncode == 0, pulled.stderr
    assert "(100%)" in pulled.stderr.splitlines()[-1]
    assert "] received" in pulled.stderr


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_6_outputs_get_the_umask_mode(files: Path, server: Server, umask: int) -> None:
    out = files / f"mode-{umask:o}"
    out.mkdir()
    (out / "conv.pt2").write_bytes((files / "conv.pt2").read_bytes())
    ser = cli("serialize", "conv.pt2", "-o", "d.json", "--weights", "w.st", cwd=out, umask=umask)
    assert ser.returncode == 0, ser.stderr
    assert cli("canonicalize", "conv.pt2", "-o", "c.json", cwd=out, umask=umask).returncode == 0
    cli("push", "mode-model", "conv.pt2", "--url", server.url, cwd=out)
    pulled = cli("pull", "mode-model", "p.pt2", "--url", server.url, cwd=out, umask=umask)
    assert pulled.returncode == 0, pulled.stderr
    modes = {name: stat.S_IMODE((out / name).stat().st_mode) for name in ("d.json", "w.st")}
    modes |= {name: stat.S_IMODE((out / name).stat().st_mode) for name in ("c.json", "p.pt2")}
    assert modes == dict.fromkeys(("d.json", "w.st", "c.json", "p.pt2"), 0o666 & ~umask)
    # a pipe (or a device: -o /dev/null) is written into, as cp does, never replaced
    pipe = out / "pipe"
    os.mkfifo(pipe)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()))
    reader.start()
    piped = cli("canonicalize", "conv.pt2", "-o", "pipe", cwd=out, umask=umask)
    reader.join(timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert got == [(out / "c.json").read_bytes()]
    assert stat.S_ISFIFO(pipe.stat().st_mode)


def test_7_inspect_says_what_it_means(
    files: Path,
    zoo: dict[str, ZooProgram],
    bert: tuple[torch.export.ExportedProgram, nn.Module, torch.Tensor],
) -> None:
    ep, model, _ = bert
    tree = cli("inspect", "bert.pt2", cwd=files)
    params = sum(p.numel() for p in model.parameters())
    root = next(line for line in tree.stdout.splitlines() if line.startswith("<root>"))
    assert f"params={params} " in root
    graph = _json(cli("inspect", "bert.pt2", "--view", "module-graph", "--json", cwd=files))
    assert all(v["id"] for v in graph["vertices"])
    assert "<root>" in [v["id"] for v in graph["vertices"]]
    text = cli("inspect", "bert.pt2", "--view", "module-graph", cwd=files).stdout
    assert not [line for line in text.splitlines() if line.startswith("   -> ")]
    # dtype names as serialize and torch print them
    weights = _json(cli("inspect", "bert.pt2", "--view", "weights", "--json", cwd=files))
    dtypes = {str(t.dtype).removeprefix("torch.") for t in [*ep.state_dict.values()]}
    dtypes |= {str(t.dtype).removeprefix("torch.") for t in ep.constants.values()}
    assert set(weights["by_dtype"]) == dtypes == {"float32", "int64"}
    manifest = _json(cli("serialize", "bert.pt2", "--json", cwd=files))["weights"]
    assert {w["dtype"] for w in manifest} == dtypes
    # node counts: the document's call nodes, and torch's own count
    for name, program in (("bert", ep), ("dynamic", zoo["dynamic"].ep)):
        ops = cli("inspect", f"{name}.pt2", "--view", "operators", cwd=files).stdout
        calls = sum(1 for n in program.graph.nodes if n.op == "call_function")
        assert ops.startswith(f"{calls} call nodes in the graph ({len(program.graph.nodes)} with")
    # torch adds a getitem per output of the cond when it loads one; the document has none
    cond = zoo["cond"].ep.graph.nodes
    counted = len(cond) - sum(1 for n in cond if n.name.startswith("getitem"))
    nested = cli("inspect", "cond.pt2", "--view", "operators", cwd=files).stdout
    assert nested.startswith(f"3 call nodes in the graph, 7 with its subgraphs ({counted} with")
    refused = cli("inspect", "bert.pt2", "--view", "partitions", cwd=files)
    assert refused.returncode == 2
    assert refused.stderr.startswith("pt2serde: usage error: --view partitions needs --supported")
    # stages split inside a wrapper, at its blocks
    staged = _json(cli("inspect", "wrapped.pt2", "--view", "stages", "--json", cwd=files))
    assert [[m for m in s["modules"] if m != "body"] for s in staged["stages"]] == [
        ["body.blocks.0", "body.blocks.1"],
        ["body.blocks.2", "body.blocks.3"],
    ]
    bert_stages = _json(
        cli(
            "inspect",
            "bert.pt2",
            "--view",
            "stages",
            "--stages",
            "4",
            "--by",
            "nodes",
            "--json",
            cwd=files,
        )
    )
    assert len(bert_stages["stages"]) == 4
    assert any(m.startswith("encoder.layer.1") for m in bert_stages["stages"][-1]["modules"])


def test_7_quantization_reads_as_text(tmp_path: Path) -> None:
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

    from tests.progs.test_inspect import _QuantLinear

    torch.manual_seed(0)
    ep = torch.export.export(_QuantLinear(), (torch.randn(2, 4),), strict=False)
    (tmp_path / "q.json").write_bytes(torch_json(ep))
    shown = cli("inspect", "q.json", "--view", "weights", cwd=tmp_path).stdout.splitlines()
    quant = [line for line in shown if line.startswith("  quantize ") or "dequantize" in line]
    assert len(quant) == 5
    assert not [line for line in quant if "{" in line or "'" in line]
    assert quant[0].startswith("  quantize per_tensor ")
    assert "scale=0.05, zero_point=3, dtype=int8, range=[-128, 127], asymmetric" in quant[0]
    assert "axis=0" in quant[2]
    assert "(weight w_int8)" in quant[2]


def test_8_diff_limits_each_file(files: Path, server: Server) -> None:
    conv = (files / "conv.pt2").read_bytes()
    assert len(conv) < UPLOAD_LIMIT < 2 * len(conv)
    with server.client() as client:
        both = client.post("/v1/diff", files={"old": conv, "new": conv})
        assert both.status_code == 200, both.text
        assert both.json()["summary"]["verdict"] == "identical"
        big = (files / "bert.pt2").read_bytes()
        refused = client.post("/v1/diff", files={"old": conv, "new": big})
    assert refused.status_code == 413
    detail = refused.json()["detail"]
    assert f"the form part 'new' is over the limit of {UPLOAD_LIMIT} bytes per file" in detail
    assert "GET /v1/models/{name}/versions/{ref}/diff?against={ref}" in detail
    # the route the detail names: versions of one model, or of two, diffed without uploads
    for name, archive in (("diff-old", "conv.pt2"), ("diff-new", "dynamic.pt2")):
        assert cli("push", name, archive, "--url", server.url, cwd=files).returncode == 0
    with httpx.Client(base_url=server.url, timeout=120) as client:
        same = client.get("/v1/models/diff-old/versions/1/diff", params={"against": "latest"})
        across = client.get("/v1/models/diff-new/versions/1/diff", params={"against": "diff-old:1"})
        missing = client.get("/v1/models/diff-new/versions/1/diff", params={"against": "nope:1"})
    assert same.json()["summary"]["verdict"] == "identical"
    assert across.status_code == 200, across.text
    assert across.json()["summary"]["verdict"] != "identical"
    assert (missing.status_code, missing.json()["code"]) == (404, "model-not-found")


def test_9_validate_checks_given_weights(files: Path) -> None:
    cli("serialize", "bert.pt2", "-o", "bert9.json", "--weights", "bert9.st", cwd=files)
    ok = cli("validate", "bert9.json", "--level", "torch", "--weights", "bert9.st", cwd=files)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("valid at level torch")
    assert "weight-missing" not in ok.stdout
    misuse = cli(
        "validate", "bert9.json", "--level", "semantic", "--weights", "bert9.st", cwd=files
    )
    assert misuse.returncode == 2
    assert "--weights is checked at --level torch only" in misuse.stderr
