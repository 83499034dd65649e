"""The benchmarked programs: stacked transformer blocks exported with torch, tiled copies, the zoo.

Exporting costs torch about 8-18 ms per node on 2 cores with a dynamic batch dim (symbolic
shape arithmetic on every op), `run_decompositions()` as much again, and `torch.export.save`
another 2 ms, so exporting 5k nodes takes 1.5 minutes and 50k nodes over 8. Only the small
programs are therefore exported: 2 and 20 blocks (about 100 and 1k nodes), and 3 blocks put
through `run_decompositions()`. The larger ones are *tiled* from those exports: the second
block is cloned with fresh value names, module paths and (perturbed) weights, exactly as torch
wrote it, and the archive is written with `app.archive.write_archive`. torch loads and runs
them (the correctness checks do), so they are programs torch accepts, with torch's node mix.

Everything generated is cached under the cache directory, keyed by torch version and a
generator version, as torch's own `.pt2` archives.
"""

from __future__ import annotations

import functools
import io
import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from app.archive import RawTensor, open_archive, write_archive
from app.settings import Limits
from bench.progress import progress

#: Bump when the generated programs change, so stale caches are not reused.
GENERATOR_VERSION = 2
WIDTH = 16
HEADS = 2
SEQ = 8
BATCH = 3
#: Limits for reading our own generated archives (the 50k program has ~5k weight members).
READ_LIMITS = Limits(max_members=100_000, max_json_bytes=512 * 1024 * 1024)

_BLOCK_RE = re.compile(r"^blocks\.(\d+)$")


# Programs are pickled to the measuring processes (bench.isolate): their callables are
# module-level functions or partials of them, never closures.


def _no_setup() -> None:
    """Nothing to prepare before torch loads the program."""


def _given(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


def _weights_inputs(width: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (torch.randn(2, width, generator=torch.Generator().manual_seed(1)),), {}


@dataclass
class Program:
    """One benchmarked program: torch's document bytes, its archive, and inputs to run it."""

    name: str
    origin: str
    nodes: int
    document: bytes
    archive: Path
    inputs: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    #: zoo programs need their custom op namespace registered before torch loads them.
    setup: Callable[[], None] = field(default=_no_setup)

    @property
    def archive_bytes(self) -> bytes:
        """The .pt2 archive's bytes."""
        return self.archive.read_bytes()


# ---------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    """RMS normalisation written out, as most decoder blocks do it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension."""
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def _rotate(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    """A decoder block: RMSNorm, fused QKV attention with rotary embeddings, SwiGLU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1 = RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.n2 = RMSNorm(width)
        self.gate_up = nn.Linear(width, 4 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """One residual attention step and one residual MLP step."""
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        q = q * cos + _rotate(q) * sin
        k = k * cos + _rotate(k) * sin
        scores = (q @ k.transpose(-2, -1)) * (d // h) ** -0.5 + mask
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        gate, up = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        out: torch.Tensor = x + self.down(F.silu(gate) * up)
        return out


class Decoder(nn.Module):
    """`layers` blocks sharing rotary tables and a causal mask (buffers), then a final norm."""

    def __init__(self, layers: int, width: int = WIDTH, heads: int = HEADS) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        head = width // heads
        freqs = 10000 ** (torch.arange(head) / head)
        angles = torch.arange(SEQ, dtype=torch.float32)[:, None] / freqs
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        self.register_buffer("mask", torch.full((SEQ, SEQ), float("-inf")).triu(1))
        self.norm = RMSNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run every block, then normalise."""
        for block in self.blocks:
            x = block(x, self.cos, self.sin, self.mask)
        out: torch.Tensor = self.norm(x)
        return out


class Weights(nn.Module):
    """A few large bias-free linear layers: an archive that is almost all weights."""

    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply each layer in turn."""
        for layer in self.layers:
            x = layer(x)
        return x


def decoder_inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example inputs of every decoder program (a batch other than the one exported with)."""
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(BATCH + 2, SEQ, WIDTH, generator=generator),), {}


def _export_decoder(layers: int) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    model = Decoder(layers).eval()
    x = torch.randn(BATCH, SEQ, WIDTH)
    return torch.export.export(
        model, (x,), dynamic_shapes={"x": {0: Dim("batch", min=2, max=1024)}}, strict=False
    )


# ---------------------------------------------------------------- cache


class Cache:
    """Generated archives under one directory, keyed by torch and generator version."""

    def __init__(self, root: Path) -> None:
        self.dir = root / f"v{GENERATOR_VERSION}-torch{torch.__version__.replace('+', '-')}"
        self.dir.mkdir(parents=True, exist_ok=True)

    def archive(self, name: str, make: Callable[[Path], None]) -> Path:
        """The cached archive `name`, made (atomically) when missing."""
        path = self.dir / f"{name}.pt2"
        if not path.exists():
            started = time.perf_counter()
            progress(f"generating {name} (cached in {self.dir})")
            temp = path.with_suffix(".tmp")
            make(temp)
            temp.replace(path)
            progress(f"generated {name} in {time.perf_counter() - started:.1f} s")
        return path


def _save(ep: torch.export.ExportedProgram, target: Path) -> None:
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    target.write_bytes(buffer.getvalue())


def _document(path: Path) -> bytes:
    with open_archive(path, READ_LIMITS) as archive:
        return archive.documents["model"]


def node_count(document: bytes) -> int:
    """Nodes of the document's top-level graph."""
    nodes: list[Any] = json.loads(document)["graph_module"]["graph"]["nodes"]
    return len(nodes)


def decoder_program(cache: Cache, layers: int, *, decomposed: bool = False) -> Program:
    """A real export of `layers` blocks with a dynamic batch dim, optionally decomposed."""

    def make(target: Path) -> None:
        ep = _export_decoder(layers)
        _save(ep.run_decompositions() if decomposed else ep, target)

    name = f"decoder{layers}{'-decomposed' if decomposed else ''}"
    path = cache.archive(name, make)
    document = _document(path)
    nodes = node_count(document)
    what = "torch.export + run_decompositions()" if decomposed else "torch.export"
    return Program(
        f"{'decomposed' if decomposed else 'decoder'}-{_size(nodes)}",
        f"{what}, {layers} blocks",
        nodes,
        document,
        path,
        decoder_inputs,
    )


def tiled_program(cache: Cache, base: Program, layers: int) -> Program:
    """`base` grown to `layers` blocks by cloning its second block (see the module doc)."""

    def make(target: Path) -> None:
        with open_archive(base.archive, READ_LIMITS) as archive:
            tensors = archive.raw_tensors()
            # torch's own sample inputs: write_archive's default (an empty member) is refused
            # by our own pickle screen (app.archive.pickles.check_torch_save).
            opaque = archive.opaque_members(64 * 1024 * 1024)
        document, grown = tile(json.loads(base.document), tensors, layers)
        write_archive(target, {"model": document}, grown, opaque_members=opaque)

    path = cache.archive(f"{base.archive.stem}-tiled{layers}", make)
    document = _document(path)
    nodes = node_count(document)
    return Program(
        f"{base.name.split('-')[0]}-{_size(nodes)}",
        f"tiled from {base.name} to {layers} blocks",
        nodes,
        document,
        path,
        decoder_inputs,
    )


def weights_program(cache: Cache, layers: int, width: int) -> Program:
    """An archive that is almost only weights: `layers` float32 width x width matrices."""

    def make(target: Path) -> None:
        torch.manual_seed(0)
        x = torch.randn(2, width)
        _save(torch.export.export(Weights(layers, width).eval(), (x,), strict=False), target)

    path = cache.archive(f"weights{layers}x{width}", make)
    document = _document(path)

    megabytes = path.stat().st_size / 1e6
    return Program(
        f"weights-{megabytes:.3g}MB",
        f"{layers} x Linear({width}, {width})",
        node_count(document),
        document,
        path,
        functools.partial(_weights_inputs, width),
    )


def zoo_programs(cache: Cache) -> list[Program]:
    """The test zoo's real programs (exported afresh each run: it takes seconds)."""
    from tests.zoo import build_zoo, register_custom_ops

    register_custom_ops()
    programs: list[Program] = []
    zoo_dir = cache.dir / "zoo"
    zoo_dir.mkdir(exist_ok=True)
    for name, zoo in build_zoo().items():
        path = zoo_dir / f"{name}.pt2"
        _save(zoo.ep, path)
        document = _document(path)

        programs.append(
            Program(
                f"zoo/{name}",
                "tests.zoo",
                node_count(document),
                document,
                path,
                functools.partial(_given, zoo.args, zoo.kwargs),
                register_custom_ops,
            )
        )
    return programs


def _size(nodes: int) -> str:
    if nodes < 1000:
        return str(nodes)
    return f"{nodes / 1000:.1f}k" if nodes < 10_000 else f"{nodes // 1000}k"


# ---------------------------------------------------------------- tiling


def tile(
    doc: dict[str, Any], tensors: list[RawTensor], layers: int
) -> tuple[bytes, list[RawTensor]]:
    """A document and tensors of `layers` blocks from one of at least three blocks."""
    graph = doc["graph_module"]["graph"]
    nodes: list[dict[str, Any]] = graph["nodes"]
    blocks = [_block_of(node) for node in nodes]
    base_layers = max(b for b in blocks if b is not None) + 1
    if base_layers < 3 or layers < 2:
        raise ValueError("tiling needs a base of 3+ blocks and a target of 2+")
    first = blocks.index(1)
    last = len(blocks) - 1 - blocks[::-1].index(1)
    template = nodes[first : last + 1]
    if any(b != 1 for b in blocks[first : last + 1]):
        raise ValueError("the second block's nodes are not contiguous")
    tail_start = len(blocks) - 1 - blocks[::-1].index(base_layers - 1) + 1
    head, tail = nodes[:first], nodes[tail_start:]

    defined = {name for node in template for name in _defined(node)}
    external = {name for node in template for name in _refs(node)} - defined
    head_defined = {name for node in head for name in _defined(node)}
    chain_in = _one(external & head_defined & graph["tensor_values"].keys(), "block input")
    second = [n for n, b in zip(nodes, blocks, strict=True) if b == 2]
    chain_out = _one({r for node in second for r in _refs(node)} & defined, "block output")
    later = {name for node in nodes[last + 1 : tail_start] for name in _defined(node)}
    last_out = _one({r for node in tail for r in _refs(node)} & later, "last block output")

    counters = _counters(nodes)
    clones: list[dict[str, Any]] = []
    value_maps = ("tensor_values", "sym_int_values", "sym_float_values", "sym_bool_values")
    previous = chain_in
    for k in range(1, layers):
        renames = {name: _fresh(name, counters) for name in defined} if k > 1 else {}
        renames[chain_in] = previous
        renames.update(_param_renames(external, k))
        for node in template:
            clone = _renamed(node, renames)
            clone["metadata"] = _module_paths(node["metadata"], k)
            clones.append(clone)
        for old, new in renames.items():
            if old in defined:
                for key in value_maps:
                    if old in graph[key]:
                        graph[key][new] = graph[key][old]
        previous = renames.get(chain_out, chain_out)
    tail = [_renamed(node, {last_out: previous}) for node in tail]
    graph["nodes"] = head + clones + tail
    dropped = {name for node in nodes[last + 1 : tail_start] for name in _defined(node)}
    for key in value_maps:
        graph[key] = {n: v for n, v in graph[key].items() if n not in dropped}
    _grow_signature(doc, layers)
    tensors_out = _grow_tensors(tensors, layers)
    return json.dumps(doc, allow_nan=False).encode("utf-8"), tensors_out


def _block_of(node: dict[str, Any]) -> int | None:
    stack = node.get("metadata", {}).get("nn_module_stack", "")
    for entry in stack.split(";"):
        parts = entry.split(",")
        if len(parts) >= 2 and (m := _BLOCK_RE.match(parts[1])):
            return int(m.group(1))
    return None


def _one(names: set[str], what: str) -> str:
    if len(names) != 1:
        raise ValueError(f"expected one {what}, found {sorted(names)}")
    return next(iter(names))


def _walk_names(arg: Any) -> Iterator[str]:
    if isinstance(arg, dict):
        for key, value in arg.items():
            if key in ("name", "as_name") and isinstance(value, str):
                yield value
            else:
                yield from _walk_names(value)
    elif isinstance(arg, list):
        for item in arg:
            yield from _walk_names(item)


def _refs(node: dict[str, Any]) -> Iterator[str]:
    for named in node["inputs"]:
        yield from _walk_names(named["arg"])


def _defined(node: dict[str, Any]) -> Iterator[str]:
    yield node["name"]
    yield from _walk_names(node["outputs"])


def _rename(arg: Any, renames: dict[str, str]) -> Any:
    if isinstance(arg, dict):
        return {
            key: renames.get(value, value)
            if key in ("name", "as_name") and isinstance(value, str)
            else _rename(value, renames)
            for key, value in arg.items()
        }
    if isinstance(arg, list):
        return [_rename(item, renames) for item in arg]
    return arg


def _renamed(node: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    out = dict(node)
    out["name"] = renames.get(node["name"], node["name"])
    out["inputs"] = [{**named, "arg": _rename(named["arg"], renames)} for named in node["inputs"]]
    out["outputs"] = _rename(node["outputs"], renames)
    return out


def _counters(nodes: list[dict[str, Any]]) -> dict[str, int]:
    counters: dict[str, int] = {}
    for node in nodes:
        for name in _defined(node):
            base, number = _split_name(name)
            counters[base] = max(counters.get(base, 0), number)
    return counters


def _split_name(name: str) -> tuple[str, int]:
    m = re.fullmatch(r"(.*?)_(\d+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, 0)


def _fresh(name: str, counters: dict[str, int]) -> str:
    base, _ = _split_name(name)
    counters[base] = counters.get(base, 0) + 1
    return f"{base}_{counters[base]}"


def _param_renames(external: set[str], k: int) -> dict[str, str]:
    return {
        name: f"p_blocks_{k}_{name.removeprefix('p_blocks_1_')}"
        for name in external
        if name.startswith("p_blocks_1_")
    }


def _module_paths(metadata: dict[str, Any], k: int) -> dict[str, Any]:
    stack = metadata.get("nn_module_stack")
    if stack is None:
        return metadata
    return {**metadata, "nn_module_stack": re.sub(r"blocks\.1(?=[.,;]|$)", f"blocks.{k}", stack)}


def _grow_signature(doc: dict[str, Any], layers: int) -> None:
    gm = doc["graph_module"]
    graph = gm["graph"]
    specs = gm["signature"]["input_specs"]
    inputs_out: list[Any] = []
    specs_out: list[Any] = []
    for graph_input, spec in zip(graph["inputs"], specs, strict=True):
        fqn = spec.get("parameter", {}).get("parameter_name", "")
        block = re.match(r"blocks\.(\d+)\.(.*)", fqn)
        if block is None or block.group(1) == "0":
            inputs_out.append(graph_input)
            specs_out.append(spec)
        elif block.group(1) == "1":
            for k in range(1, layers):
                value = f"p_blocks_{k}_{block.group(2).replace('.', '_')}"
                inputs_out.append({"as_tensor": {"name": value}})
                specs_out.append(
                    {
                        "parameter": {
                            "arg": {"name": value},
                            "parameter_name": f"blocks.{k}.{block.group(2)}",
                        }
                    }
                )
    graph["inputs"] = inputs_out
    gm["signature"]["input_specs"] = specs_out
    values = graph["tensor_values"]
    for graph_input in inputs_out:
        name = graph_input["as_tensor"]["name"]
        if name.startswith("p_blocks_") and name not in values:
            values[name] = values["p_blocks_1_" + name.split("_", 3)[3]]
    calls: list[Any] = []
    for entry in gm["module_call_graph"]:
        block = re.match(r"blocks\.(\d+)(.*)", entry["fqn"])
        if block is None or block.group(1) == "0":
            calls.append(entry)
        elif block.group(1) == "1":
            calls.extend({**entry, "fqn": f"blocks.{k}{block.group(2)}"} for k in range(1, layers))
    gm["module_call_graph"] = _module_order(calls)


def _module_order(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(entry: dict[str, Any]) -> tuple[int, int]:
        block = re.match(r"blocks\.(\d+)", entry["fqn"])
        return (
            (1, int(block.group(1))) if block else (0 if entry["fqn"] in ("", "blocks") else 2, 0)
        )

    return sorted(calls, key=key)


def _grow_tensors(tensors: list[RawTensor], layers: int) -> list[RawTensor]:
    rng = np.random.default_rng(0)
    out: list[RawTensor] = []
    for tensor in tensors:
        block = re.match(r"blocks\.(\d+)\.(.*)", tensor.name)
        if block is None or block.group(1) == "0":
            out.append(tensor)
        elif block.group(1) == "1":
            values = np.frombuffer(tensor.data, dtype=np.float32)
            for k in range(1, layers):
                noise = rng.normal(0.0, 0.01, values.shape).astype(np.float32)
                data = (values + noise).tobytes()
                out.append(
                    RawTensor(f"blocks.{k}.{block.group(2)}", tensor.kind, tensor.meta, data)
                )
    order = {name: i for i, name in enumerate(t.name for t in out)}
    return sorted(out, key=lambda t: (_fqn_rank(t.name), order[t.name]))


def _fqn_rank(name: str) -> tuple[int, int]:
    block = re.match(r"blocks\.(\d+)\.", name)
    return (0, int(block.group(1))) if block else (1, 0)


def layers_for(nodes: int, per_block: float) -> int:
    """Blocks needed for about `nodes` nodes."""
    return max(3, math.ceil(nodes / per_block))
