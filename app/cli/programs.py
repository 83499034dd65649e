"""The program commands: serialize, deserialize, canonicalize, hash, validate, diff, inspect."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

from app import files
from app import operations as ops
from app.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    Parser,
    Progress,
    emit,
    source,
    step,
    usage_error,
    write_output,
)
from app.jobs import documents as jobs
from app.programs.diff import render_text
from app.programs.inspect.registry import answer, render, views
from app.settings import Settings

if TYPE_CHECKING:
    from app.cli.common import Subcommands

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


class _EarlyPool:
    """One torch worker, started as the command starts: it imports torch while this process
    reads and checks the input, and is sent nothing (so loads nothing) unless the check passes.

    Forked from this process while it has not imported torch (cheap, and the app's modules come
    along already imported); from the forkserver otherwise (a process that holds torch's
    threads must not fork them)."""

    def __init__(self, settings: Settings, stack: ExitStack) -> None:
        from app.workers.torch import TorchPool

        method = "forkserver" if "torch" in sys.modules else "fork"
        one = settings.model_copy(update={"workers": 1})
        self.pool = stack.enter_context(TorchPool(one, start_method=method))

    def submit(self, job: Callable[[*Ts], R], *args: *Ts, timeout_s: float | None = None) -> R:
        """Run a torch job in the worker (waiting for it to be ready)."""
        return self.pool.submit(job, *args, timeout_s=timeout_s)


def _serialize(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with source(args, settings) as opened:
        step(args, "reading and screening documents, hashing weights")
        result = ops.serialize(opened, settings)
        if args.weights:
            step(args, f"writing {args.weights}")
            write_output(args.weights, ops.weights_safetensors(opened))
    if args.output:
        write_output(args.output, result.json())
    total = sum(w.nbytes for w in result.weights)
    lines = [
        f"{name}: {len(doc.graph_module.graph.nodes)} call nodes, schema "
        f"{doc.schema_version.major}.{doc.schema_version.minor}, torch {doc.torch_version}"
        for name, doc in result.documents.items()
    ]
    lines.append(f"weights: {len(result.weights)} tensors, {total / 1e6:.2f} MB")
    emit(args, {"weights": result.manifest(), "models": sorted(result.documents)}, "\n".join(lines))
    return EXIT_OK


def _deserialize(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    weights = Path(args.weights) if args.weights else None
    output = Path(args.output)
    # the worker writes a file beside the output, renamed over it only once it is whole
    with files.atomic_path(output) as partial, ExitStack() as stack:
        pool = _EarlyPool(settings, stack)
        with source(args, settings) as opened:
            tensors = len(ops.weights_from(weights, opened, args.model))
            step(args, f"building the program with torch ({tensors} tensors)")
            version = jobs.deserialize_to(
                opened, settings, pool, partial, args.model, weights, args.for_torch
            )
    size = output.stat().st_size
    data: dict[str, object] = {"output": args.output, "bytes": size}
    human = f"wrote {args.output} ({size} bytes)"
    if version is not None:
        data |= {"for_torch": args.for_torch, "schema_version": version}
        human += f" for torch {args.for_torch} (schema {version})"
    emit(args, data, human)
    return EXIT_OK


def _canonicalize(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with source(args, settings) as opened:
        step(args, "canonicalizing and hashing")
        result = ops.canonical(opened, settings, args.model)
    if args.output:
        write_output(args.output, result.data)
    digests = asdict(result.vouched())
    human = "\n".join(
        f"{k:8} {v or 'none: a JSON document holds no weights (hash its .pt2 for them)'}"
        for k, v in digests.items()
    )
    if args.output != "-":
        emit(args, {"model": result.model, "digests": digests}, human)
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    if args.weights and args.level != "torch":
        return usage_error("--weights is checked at --level torch only")
    settings = Settings.from_env()
    with ExitStack() as stack:
        pool = _EarlyPool(settings, stack) if args.level == "torch" else None
        with source(args, settings) as opened:
            step(args, f"validating at level {args.level}")
            weights = Path(args.weights) if args.weights else None
            report = jobs.validate(opened, settings, args.level, pool, args.model, weights)
    lines = [
        f"{'valid' if report.valid else 'INVALID'} at level {report.level}; "
        f"schema >= {report.min_schema_version or '?'}; "
        f"loaded as it is by torch {', '.join(report.readable_by) or '(none we know)'}"
    ]
    lines += [f"  {f.severity:7} {f.code:28} {f.path or '/'}  {f.message}" for f in report.findings]
    if report.namespaces_to_register:
        lines.append(f"  register first: {', '.join(report.namespaces_to_register)}")
    emit(args, report.model_dump(mode="json"), "\n".join(lines))
    return EXIT_OK if report.valid else EXIT_INVALID


def _diff(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    old, new = Path(args.input), Path(args.new)
    progress = Progress(args, old.stat().st_size + new.stat().st_size)
    progress.step(f"opening {old} and {new}")
    with (
        ops.open_source(old, ops.media_of(old), settings) as was,
        ops.open_source(new, ops.media_of(new), settings) as now,
    ):
        progress.step("aligning nodes, comparing interfaces, weights and modules")
        result = ops.program_diff(was, now, settings, args.model)
    progress.step("done")
    emit(args, result.model_dump(mode="json"), render_text(result))
    breaking = result.summary.verdict == "breaking"
    return EXIT_INVALID if args.fail_on_breaking and breaking else EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    if args.view == "partitions" and not args.supported:
        return usage_error(
            "--view partitions needs --supported TARGET_OR_NAMESPACE ... "
            "(e.g. --supported aten.linear aten.relu, or --supported aten)"
        )
    settings = Settings.from_env()
    request = ops.InspectRequest(
        args.view,
        args.depth,
        args.stages,
        args.by,
        tuple(args.supported or ()),
        args.allow_single_node,
    )
    with source(args, settings) as opened:
        result = ops.inspect(opened, settings, request, args.model)
    emit(args, answer(args.view, result).model_dump(mode="json"), render(args.view, result))
    return EXIT_OK


def register(sub: Subcommands, shared: Parser) -> None:
    """Add the program commands."""

    def command(name: str, run: Callable[[argparse.Namespace], int], help_: str) -> Any:
        cmd = sub.add_parser(name, help=help_, parents=[shared])
        cmd.add_argument(
            "input", help="a .pt2 archive, a JSON document, or what serialize -o writes"
        )
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.add_argument("--model", help="which model of a multi-model archive")
        cmd.set_defaults(run=run)
        return cmd

    ser = command("serialize", _serialize, "archive -> documents and weights manifest")
    ser.add_argument("-o", "--output", help="write documents + manifest JSON here ('-': stdout)")
    ser.add_argument("--weights", help="also write the weights as a safetensors file here")
    de = command("deserialize", _deserialize, "document + weights -> a loadable .pt2")
    de.add_argument("--weights", help="safetensors weights (default: the archive's own)")
    de.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    de.add_argument(
        "--for-torch",
        metavar="RELEASE",
        help="write the archive this older torch release loads (e.g. 2.10); refused, with "
        "nothing written, where that release would read the program differently",
    )
    can = command("canonicalize", _canonicalize, "canonical document bytes and digests")
    can.add_argument("-o", "--output", help="write the canonical bytes here ('-': stdout)")
    command("hash", _canonicalize, "graph, weights and program digests").set_defaults(output=None)
    val = command("validate", _validate, "validation report (exit 1 if invalid)")
    val.add_argument("--level", choices=["schema", "semantic", "torch"], default="torch")
    val.add_argument(
        "--weights", help="safetensors weights the torch level checks (default: the archive's own)"
    )
    dif = command("diff", _diff, "what changed between two programs")
    dif.add_argument("new", help="the newer .pt2 archive or JSON document")
    dif.add_argument(
        "--fail-on-breaking", action="store_true", help="exit 1 when the change is breaking"
    )
    _inspect_options(
        command("inspect", _inspect, "what is in a program (no torch, nothing unpickled)")
    )


def _inspect_options(insp: argparse.ArgumentParser) -> None:
    insp.add_argument(
        "--view",
        choices=list(views()),
        default="modules",
    )
    insp.add_argument("--depth", type=int, default=1, help="module-graph depth")
    insp.add_argument("--stages", type=int, default=2, help="number of pipeline stages")
    insp.add_argument("--by", choices=["param_bytes", "nodes"], default="param_bytes")
    insp.add_argument("--supported", nargs="*", help="supported targets or namespaces")
    insp.add_argument("--allow-single-node", action="store_true")
