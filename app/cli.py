"""The `pt2serde` command. Exit codes: 0 ok, 1 invalid input, 2 usage error, 3 an extra is missing.

The document commands need only the base install; deserialize and validate --level torch need
`pt2serde[torch]`, serve and the registry commands `pt2serde[server]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NoReturn

import orjson

import schema
from app import files
from app import operations as ops
from app.failure import Failure
from app.programs.diff import render_text
from app.settings import Settings
from schema.diff import DescriptionLike

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
#: A command needs an optional dependency (an extra) that is not installed.
EXIT_MISSING_EXTRA = 3
#: Inputs at least this large get progress lines on stderr (and any input with --progress).
PROGRESS_BYTES = 64 * 1024 * 1024


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line on a usage error."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"pt2serde: usage error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _emit(args: argparse.Namespace, data: Any, human: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(human.rstrip("\n") + "\n")


class _Progress:
    """Step lines on stderr with elapsed time, for large inputs or when asked."""

    def __init__(self, args: argparse.Namespace, size: int) -> None:
        self.on = bool(getattr(args, "progress", False)) or size >= PROGRESS_BYTES
        self.start = time.monotonic()

    def step(self, text: str) -> None:
        if self.on:
            sys.stderr.write(f"[{time.monotonic() - self.start:7.2f}s] {text}\n")
            sys.stderr.flush()


def _write_atomic(target: str, data: bytes) -> None:
    """Write a file whole or not at all (temp file beside it, fsync, rename); '-' is stdout."""
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    path = Path(target)
    fd, tmp = files.temporary_beside(path)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        files.publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def _source(args: argparse.Namespace, settings: Settings) -> Iterator[ops.Source]:
    path = Path(args.input)
    progress = _Progress(args, path.stat().st_size)
    progress.step(f"opening {path} ({path.stat().st_size / 1e6:.1f} MB)")
    with ops.open_source(path, ops.media_of(path), settings) as source:
        args.progress_log = progress
        yield source
    progress.step("done")


def _step(args: argparse.Namespace, text: str) -> None:
    progress: _Progress | None = getattr(args, "progress_log", None)
    if progress is not None:
        progress.step(text)


def _pool(settings: Settings) -> Any:
    from app.bridge import WorkerPool

    return WorkerPool(settings.model_copy(update={"workers": 1}))


class _LazyPool:
    """One torch worker, started by the first job: a request refused before it starts none."""

    def __init__(self, settings: Settings, stack: ExitStack) -> None:
        self.settings = settings
        self.stack = stack
        self.pool: Any = None

    def submit(self, job: str, *args: object) -> object:
        """Run a torch job in the worker, starting it first if need be."""
        if self.pool is None:
            self.pool = self.stack.enter_context(_pool(self.settings))
        return self.pool.submit(job, *args)


def _serialize(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with _source(args, settings) as source:
        _step(args, "reading and screening documents, hashing weights")
        result = ops.serialize(source, settings)
        if args.weights:
            _step(args, f"writing {args.weights}")
            _write_atomic(args.weights, ops.weights_safetensors(source))
    data = {
        "documents": {n: orjson.Fragment(schema.dump(d)) for n, d in result.documents.items()},
        "weights": [w.model_dump(mode="json") for w in result.weights],
    }
    if args.output:
        _write_atomic(args.output, orjson.dumps(data))
    total = sum(w.nbytes for w in result.weights)
    lines = [
        f"{name}: {len(doc.graph_module.graph.nodes)} call nodes, schema "
        f"{doc.schema_version.major}.{doc.schema_version.minor}, torch {doc.torch_version}"
        for name, doc in result.documents.items()
    ]
    lines.append(f"weights: {len(result.weights)} tensors, {total / 1e6:.2f} MB")
    _emit(args, {"weights": data["weights"], "models": sorted(result.documents)}, "\n".join(lines))
    return EXIT_OK


def _deserialize(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    weights = Path(args.weights) if args.weights else None
    output = Path(args.output)
    # the worker writes a file beside the output, renamed over it only once it is whole
    fd, partial = files.temporary_beside(output)
    os.close(fd)
    try:
        with _source(args, settings) as source, ExitStack() as stack:
            pool = _LazyPool(settings, stack)
            tensors = ops.weights_from(weights, source, args.model)
            _step(args, f"building the program with torch ({len(tensors)} tensors)")
            ops.deserialize_to(source, tensors, settings, pool, partial, args.model)
        files.publish(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    size = output.stat().st_size
    _emit(args, {"output": args.output, "bytes": size}, f"wrote {args.output} ({size} bytes)")
    return EXIT_OK


def _canonicalize(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with _source(args, settings) as source:
        _step(args, "canonicalizing and hashing")
        result = ops.canonical(source, settings, args.model)
    if args.output:
        _write_atomic(args.output, result.data)
    digests = {
        "graph": result.digests.graph,
        "weights": result.digests.weights,
        "program": result.digests.program,
    }
    human = "\n".join(f"{k:8} {v}" for k, v in digests.items())
    if args.output != "-":
        _emit(args, {"model": result.model, "digests": digests}, human)
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    if args.weights and args.level != "torch":
        sys.stderr.write("pt2serde: usage error: --weights is checked at --level torch only\n")
        return EXIT_USAGE
    settings = Settings.from_env()
    with _source(args, settings) as source:
        _step(args, f"validating at level {args.level}")
        if args.level == "torch":
            weights = Path(args.weights) if args.weights else None
            with ExitStack() as stack:
                pool = _LazyPool(settings, stack)
                report = ops.validate(source, args.level, settings, pool, args.model, weights)
        else:
            report = ops.validate(source, args.level, settings, None, args.model)
    lines = [
        f"{'valid' if report.valid else 'INVALID'} at level {report.level}; "
        f"schema >= {report.min_schema_version or '?'}, "
        f"torch >= {report.oldest_torch_release or '?'}"
    ]
    lines += [f"  {f.severity:7} {f.code:28} {f.path or '/'}  {f.message}" for f in report.findings]
    if report.namespaces_to_register:
        lines.append(f"  register first: {', '.join(report.namespaces_to_register)}")
    _emit(args, report.model_dump(mode="json"), "\n".join(lines))
    return EXIT_OK if report.valid else EXIT_INVALID


def _diff(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    old, new = Path(args.input), Path(args.new)
    progress = _Progress(args, old.stat().st_size + new.stat().st_size)
    progress.step(f"opening {old} and {new}")
    with (
        ops.open_source(old, ops.media_of(old), settings) as was,
        ops.open_source(new, ops.media_of(new), settings) as now,
    ):
        progress.step("aligning nodes, comparing interfaces, weights and modules")
        result = ops.program_diff(was, now, settings, args.model)
    progress.step("done")
    _emit(args, result.model_dump(mode="json"), render_text(result))
    breaking = result.summary.verdict == "breaking"
    return EXIT_INVALID if args.fail_on_breaking and breaking else EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    if args.view == "partitions" and not args.supported:
        sys.stderr.write(
            "pt2serde: usage error: --view partitions needs --supported TARGET_OR_NAMESPACE ... "
            "(e.g. --supported aten.linear aten.relu, or --supported aten)\n"
        )
        return EXIT_USAGE
    settings = Settings.from_env()
    request = ops.InspectRequest(
        args.view,
        args.depth,
        args.stages,
        args.by,
        tuple(args.supported or ()),
        args.allow_single_node,
    )
    with _source(args, settings) as source:
        result = ops.inspect(source, settings, request, args.model)
    data = result.model_dump(mode="json")
    _emit(args, {"view": args.view, **data}, _render_view(args.view, data))
    return EXIT_OK


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB"


def _render_view(view: str, data: dict[str, Any]) -> str:
    """A person's reading of an inspection view (the JSON has everything)."""
    lines: list[str] = []
    if view == "modules":
        lines.append("module  type  calls  call nodes own/with submodules  parameters with them")
        for m in data["modules"]:
            params = m["total_parameters"]
            lines.append(
                f"{'  ' * m['depth']}{m['path'] or '<root>'}  {m['type'] or ''}  "
                f"calls={m['calls']} nodes={m['nodes']}/{m['total_nodes']} "
                f"params={params['numel']} ({_mb(params['nbytes'])})"
            )
    elif view == "module-graph":
        lines.append(
            f"depth {data['depth']}: {len(data['vertices'])} vertices, chain={data['is_chain']}"
        )
        lines += [
            f"  {v['id']}  {v['type'] or v['kind']}  nodes={v['nodes']} "
            f"params={_mb(v['param_bytes'])}"
            for v in data["vertices"]
            if v["kind"] in ("module", "ops")
        ]
        lines += [
            f"  {e['source']} -> {e['target']}  ({len(e['values'])} values)" for e in data["edges"]
        ]
    elif view == "stages":
        for st in data["stages"]:
            lines.append(
                f"stage {st['index']}: {', '.join(m or '<root ops>' for m in st['modules'])}  "
                f"nodes={st['nodes']} "
                f"params={_mb(st['param_bytes'])}"
            )
    elif view == "partitions":
        lines.append(f"{len(data['partitions'])} partitions for {', '.join(data['supported'])}")
        for i, part in enumerate(data["partitions"]):
            lines.append(f"  #{i}: {len(part['nodes'])} nodes: {', '.join(part['nodes'][:8])}")
    elif view == "operators":
        total, main = data["total"], data["graph"]["nodes"]
        nested = f", {total['nodes']} with its subgraphs" if total["nodes"] != main else ""
        lines.append(
            f"{main} call nodes in the graph{nested} ({data['nodes_with_io']} with placeholders, "
            "get_attrs and the output, as torch counts them)"
        )
        ranked = sorted(total["by_target"].items(), key=lambda kv: -kv[1])
        lines += [f"  {count:6}  {target}" for target, count in ranked]
        if data["custom_namespaces"]:
            lines.append(f"register first: {', '.join(data['custom_namespaces'])}")
    else:
        lines.append(f"{data['total']['count']} tensors, {_mb(data['total']['nbytes'])}")
        for label in ("by_kind", "by_dtype"):
            for key, tally in data[label].items():
                lines.append(f"  {key:12} {tally['count']:5}  {_mb(tally['nbytes'])}")
        lines += [_quant_line(q) for q in data["quantized"]]
    return "\n".join(lines)


def _quant_line(q: dict[str, Any]) -> str:
    """One quantize or dequantize node's parameters as text."""

    def ref(value: dict[str, Any]) -> str:
        return f"{value['value']} (weight {value['weight']})" if value["weight"] else value["value"]

    fields = [
        f"{key}={q[key]}"
        for key in ("scale", "zero_point", "axis", "group_size", "block_size", "dtype", "out_dtype")
        if q[key] is not None
    ]
    if q["quant_min"] is not None or q["quant_max"] is not None:
        fields.append(f"range=[{q['quant_min']}, {q['quant_max']}]")
    if q["symmetric"] is not None:
        fields.append("symmetric" if q["symmetric"] else "asymmetric")
    fields += [f"{key}={ref(value)}" for key, value in q["tensors"].items()]
    return f"  {q['op']} {q['scheme']} {q['node']} of {ref(q['input'])}: {', '.join(fields)}"


def _server(args: argparse.Namespace) -> str:
    url: str = args.url or os.environ.get("PT2SERDE_URL", "http://127.0.0.1:8000")
    return url


def _version_line(v: Any) -> str:
    aliases = f"  [{', '.join(v.aliases)}]" if v.aliases else ""
    gone = f"  deleted: {v.deleted_reason}" if v.deleted_at else ""
    return (
        f"{v.model} v{v.version}  schema {v.schema_version}  "
        f"{v.summary.parameter_count} params  program {v.digests.program[:16]}{aliases}{gone}"
    )


class _Transfer:
    """Bytes sent or received, as progress lines at most twice a second and at the end."""

    def __init__(self, args: argparse.Namespace, verb: str) -> None:
        self.args = args
        self.verb = verb
        self.progress: _Progress | None = None
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if self.progress is None:
            self.progress = _Progress(self.args, total)
        now = time.monotonic()
        if done != total and now - self.last < 0.5:
            return
        self.last = now
        of = f" of {total / 1e6:.1f} MB ({100 * done // total}%)" if total else " MB"
        self.progress.step(f"{self.verb} {done / 1e6:.1f}{of}")


def _push(args: argparse.Namespace) -> int:
    from app.registry import client

    pushed = client.push(
        _server(args),
        args.name,
        Path(args.input),
        model=args.model,
        progress=_Transfer(args, "sent"),
    )
    verb = "pushed" if pushed.created else "already there:"
    _emit(args, pushed.version.model_dump(mode="json"), f"{verb} {_version_line(pushed.version)}")
    return EXIT_OK


def _pull(args: argparse.Namespace) -> int:
    from app.registry import client

    got = client.pull(
        _server(args), args.name, Path(args.dest), args.ref, progress=_Transfer(args, "received")
    )
    _emit(args, got.model_dump(mode="json"), f"wrote {args.dest}: {_version_line(got)}")
    return EXIT_OK


def _versions(args: argparse.Namespace) -> int:
    from app.registry import client

    found = client.versions(_server(args), args.name, include_deleted=args.include_deleted)
    data = [v.model_dump(mode="json") for v in found]
    _emit(args, data, "\n".join(_version_line(v) for v in found) or "no versions")
    return EXIT_OK


def _alias(args: argparse.Namespace) -> int:
    from app.registry import client

    info = client.alias(_server(args), args.name, args.alias, args.version)
    _emit(args, info.model_dump(mode="json"), f"{args.name}: {args.alias} -> v{args.version}")
    return EXIT_OK


def _schema_versions(args: argparse.Namespace) -> int:
    rows = schema.versions()
    data = [
        {"version": v.label, "torch_releases": list(v.torch_releases), "describable": v.describable}
        for v in rows
    ]
    lines = [
        f"{v.label:>6}  {', '.join(v.torch_releases)}"
        + ("" if v.describable else "  (not describable: describe and diff cover 8.x)")
        for v in rows
    ]
    _emit(args, data, "\n".join(lines))
    return EXIT_OK


def _schema_describe(args: argparse.Namespace) -> int:
    out = (
        schema.describe(args.version) if not args.json_schema else schema.json_schema(args.version)
    )
    sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
    return EXIT_OK


def _description(text: str) -> DescriptionLike:
    """A version number, or the path of a schema.yaml (YAML or JSON)."""
    path = Path(text)
    if path.is_file():
        return schema.load_description(path.read_bytes())
    return text


def _schema_diff(args: argparse.Namespace) -> int:
    old, new = _description(args.old), _description(args.new)
    result = schema.diff(old, new)
    verdict = schema.compatibility(old, new, args.mode) if args.mode else None
    if args.json:
        data: dict[str, Any] = {
            "old_version": result.old_version,
            "new_version": result.new_version,
            "required_bump": result.required_bump,
            "changes": [{**c.__dict__, "message": c.message} for c in result.changes],
        }
        if verdict is not None:
            data["verdict"] = {
                "ok": verdict.ok,
                "mode": str(verdict.mode),
                "violations": [c.message for c in verdict.violations],
                "numbers_follow_rules": verdict.numbers_follow_rules,
                "message": verdict.message,
            }
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(schema.changelog(result))
        if verdict is not None:
            status = "holds" if verdict.ok else "FAILS"
            sys.stdout.write(f"\n{verdict.mode} {status}")
            sys.stdout.write(
                f": {len(verdict.violations)} violation(s)\n" if not verdict.ok else "\n"
            )
            for c in verdict.violations:
                sys.stdout.write(f"- {c.message}\n")
            if not verdict.numbers_follow_rules:
                sys.stdout.write(f"version numbers: {verdict.message}\n")
    return EXIT_OK if verdict is None or verdict.ok else EXIT_INVALID


def _schema_compat(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with _source(args, settings) as source:
        result = ops.compat(source, settings, args.model)
    lines = [
        f"needs schema >= {result.min_version}",
        f"readable by torch {', '.join(result.readable_by)}",
    ]
    lines += [f"torch {release} {why}" for release, why in result.read_ignoring]
    lines += [f"not by torch {release}: {why}" for release, why in result.not_readable_by]
    _emit(args, result.__dict__, "\n".join(lines))
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = Settings.from_env()
    uvicorn.run(
        "app.main:app",
        host=args.host or settings.host,
        port=args.port or settings.port,
        workers=args.workers or settings.http_workers or os.cpu_count() or 1,
        log_level="info",
        timeout_keep_alive=settings.http_keep_alive_s,
        limit_concurrency=settings.http_max_connections or None,
        timeout_graceful_shutdown=settings.http_graceful_shutdown_s,
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="pt2serde", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # every command takes --progress (those with nothing long to report accept and ignore it)
    shared = _Parser(add_help=False)
    shared.add_argument(
        "--progress",
        action="store_true",
        help=f"progress lines on stderr (on by itself for inputs over {PROGRESS_BYTES >> 20} MB)",
    )

    serve = sub.add_parser("serve", help="run the HTTP service", parents=[shared])
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int, help="HTTP server processes (default: one per CPU)")
    serve.set_defaults(run=_serve)

    def operation(name: str, run: Callable[[argparse.Namespace], int], help_: str) -> Any:
        cmd = sub.add_parser(name, help=help_, parents=[shared])
        cmd.add_argument(
            "input", help="a .pt2 archive, a JSON document, or what serialize -o writes"
        )
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.add_argument("--model", help="which model of a multi-model archive")
        cmd.set_defaults(run=run)
        return cmd

    ser = operation("serialize", _serialize, "archive -> documents and weights manifest")
    ser.add_argument("-o", "--output", help="write documents + manifest JSON here ('-': stdout)")
    ser.add_argument("--weights", help="also write the weights as a safetensors file here")
    de = operation("deserialize", _deserialize, "document + weights -> a loadable .pt2")
    de.add_argument("--weights", help="safetensors weights (default: the archive's own)")
    de.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    can = operation("canonicalize", _canonicalize, "canonical document bytes and digests")
    can.add_argument("-o", "--output", help="write the canonical bytes here ('-': stdout)")
    operation("hash", _canonicalize, "graph, weights and program digests").set_defaults(output=None)
    val = operation("validate", _validate, "validation report (exit 1 if invalid)")
    val.add_argument("--level", choices=["schema", "semantic", "torch"], default="torch")
    val.add_argument(
        "--weights", help="safetensors weights the torch level checks (default: the archive's own)"
    )

    dif = operation("diff", _diff, "what changed between two programs")
    dif.add_argument("new", help="the newer .pt2 archive or JSON document")
    dif.add_argument(
        "--fail-on-breaking", action="store_true", help="exit 1 when the change is breaking"
    )
    insp = operation("inspect", _inspect, "what is in a program (no torch, nothing unpickled)")
    insp.add_argument(
        "--view",
        choices=["modules", "module-graph", "stages", "partitions", "operators", "weights"],
        default="modules",
    )
    insp.add_argument("--depth", type=int, default=1, help="module-graph depth")
    insp.add_argument("--stages", type=int, default=2, help="number of pipeline stages")
    insp.add_argument("--by", choices=["param_bytes", "nodes"], default="param_bytes")
    insp.add_argument("--supported", nargs="*", help="supported targets or namespaces")
    insp.add_argument("--allow-single-node", action="store_true")

    def registry(name: str, run: Callable[[argparse.Namespace], int], help_: str) -> Any:
        cmd = sub.add_parser(name, help=help_, parents=[shared])
        cmd.add_argument("name", help="the model name")
        cmd.add_argument("--url", help="the service (default $PT2SERDE_URL or 127.0.0.1:8000)")
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(run=run)
        return cmd

    push = registry("push", _push, "push a .pt2 as a new version of a model")
    push.add_argument("input", help="the .pt2 archive")
    push.add_argument("--model", help="which model of a multi-model archive")
    pull = registry("pull", _pull, "fetch a version's .pt2 (checked against its sha256)")
    pull.add_argument("dest", help="where to write the .pt2")
    pull.add_argument("--ref", default="latest", help="a version number, an alias or latest")
    vers = registry("versions", _versions, "list a model's versions")
    vers.add_argument("--include-deleted", action="store_true")
    ali = registry("alias", _alias, "point an alias (champion, staging, ...) at a version")
    ali.add_argument("alias")
    ali.add_argument("version", type=int)

    sch = sub.add_parser("schema", help="schema versions and descriptions", parents=[shared])
    sch_sub = sch.add_subparsers(dest="schema_command", required=True, parser_class=_Parser)
    versions = sch_sub.add_parser(
        "versions", help="known schema versions and torch releases", parents=[shared]
    )
    versions.add_argument("--json", action="store_true")
    versions.set_defaults(run=_schema_versions)
    describe = sch_sub.add_parser(
        "describe", help="describe a version (schema.yaml shape)", parents=[shared]
    )
    describe.add_argument("version")
    describe.add_argument("--json-schema", action="store_true", help="print the JSON Schema")
    describe.set_defaults(run=_schema_describe)
    sdiff = sch_sub.add_parser(
        "diff",
        help="changes between two versions or schema.yaml files (exit 1 if MODE fails)",
        parents=[shared],
    )
    sdiff.add_argument("old", help="a version (8.7) or a schema.yaml path")
    sdiff.add_argument("new", help="a version (8.20) or a schema.yaml path")
    sdiff.add_argument(
        "--mode",
        type=str.upper,
        choices=[m.value for m in schema.Mode],
        help="check this compatibility mode",
    )
    sdiff.add_argument("--json", action="store_true", help="JSON instead of a markdown changelog")
    sdiff.set_defaults(run=_schema_diff)
    scompat = sch_sub.add_parser(
        "compat", help="torch releases that can read a program", parents=[shared]
    )
    scompat.add_argument("input", help="a .pt2 archive or a JSON document")
    scompat.add_argument("--json", action="store_true")
    scompat.add_argument("--model")
    scompat.set_defaults(run=_schema_compat)
    return parser


#: The extra that installs each optional top-level module the commands import.
_EXTRA_OF: dict[str, str] = {
    "torch": "torch",
    **dict.fromkeys(
        ("fastapi", "starlette", "uvicorn", "multipart", "sqlalchemy", "alembic", "psycopg"),
        "server",
    ),
}


def _missing_extra(command: str, module: str) -> int:
    extra = _EXTRA_OF[module]
    sys.stderr.write(
        f"pt2serde: missing-extra: {command} needs {module}, which is not installed: "
        f"pip install 'pt2serde[{extra}]'\n"
    )
    return EXIT_MISSING_EXTRA


def _torch_command(args: argparse.Namespace) -> str | None:
    """The command line, when it runs torch (in a worker, so a missing torch shows up late)."""
    if args.command == "deserialize":
        return "deserialize"
    if args.command == "validate" and args.level == "torch":
        return "validate --level torch"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run one subcommand, print one clear line on failure."""
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    torch_command = _torch_command(args)
    if torch_command is not None and importlib.util.find_spec("torch") is None:
        return _missing_extra(torch_command, "torch")
    try:
        return run(args)
    except ModuleNotFoundError as exc:
        module = (exc.name or "").partition(".")[0]
        if module not in _EXTRA_OF:
            raise
        return _missing_extra(args.command, module)
    except (Failure, schema.SchemaError) as exc:
        code = getattr(exc, "code", "error")
        message = exc.message if isinstance(exc, Failure) else str(exc)
        _fail(args, code, message, list(getattr(exc, "issues", None) or []))
    except OSError as exc:
        _fail(args, "io-error", f"{exc.strerror or exc}: {exc.filename or ''}", [])
    return EXIT_INVALID


#: How many of a failure's issues the text output lists (--json gives them all).
SHOWN_ISSUES = 5


def _fail(args: argparse.Namespace, code: str, message: str, issues: list[schema.Issue]) -> None:
    """A failure: one line on stderr and its first issues; with --json, also the whole problem
    (the HTTP problem's code, detail and errors) on stdout, where a script reads results."""
    if getattr(args, "json", False):
        problem = {
            "code": code,
            "detail": message,
            "errors": [{"code": i.code, "path": i.path, "message": i.message} for i in issues],
        }
        sys.stdout.buffer.write(orjson.dumps(problem, option=orjson.OPT_INDENT_2) + b"\n")
    lines = [f"pt2serde: {code}: {message}"]
    lines += [f"  {i.code}  {i.path or '/'}  {i.message}" for i in issues[:SHOWN_ISSUES]]
    if len(issues) > SHOWN_ISSUES:
        lines.append(f"  ... and {len(issues) - SHOWN_ISSUES} more (--json lists them all)")
    sys.stderr.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
