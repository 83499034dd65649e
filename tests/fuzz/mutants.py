"""Mutants: one mutated archive or document and the HTTP request that submits it.

A mutant is a pure function of (corpus, seed, index): any one of a campaign's mutants can be
rebuilt alone (`python -m tests.fuzz --seed S --only I`).
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from app import operations as ops
from app.settings import Settings
from tests.fuzz import jsonmut, zipmut
from tests.fuzz.jsonmut import Context
from tests.fuzz.zipmut import Entry
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes, torch_json


@dataclass(frozen=True)
class Corpus:
    """The real programs mutants start from: archives, their members, documents and weights."""

    archives: dict[str, bytes]
    members: dict[str, list[Entry]]
    documents: dict[str, bytes]
    weights: dict[str, bytes]

    @property
    def names(self) -> list[str]:
        """The base programs, sorted."""
        return sorted(self.archives)


def build_corpus(zoo: dict[str, ZooProgram]) -> Corpus:
    """The corpus of every zoo program: torch.export.save archives and torch's documents."""
    archives = {name: archive_bytes(zoo[name].ep) for name in PROGRAM_NAMES}
    weights: dict[str, bytes] = {}
    settings = Settings()
    for name, data in archives.items():
        with ops.open_source(data, "zip", settings) as source:
            weights[name] = ops.weights_safetensors(source)
    return Corpus(
        archives,
        {name: zipmut.entries(data) for name, data in archives.items()},
        {name: torch_json(zoo[name].ep) for name in PROGRAM_NAMES},
        weights,
    )


Part = tuple[str, tuple[str, bytes, str]]


@dataclass(frozen=True)
class Request:
    """One POST: path, query, and either a raw body or multipart form parts."""

    path: str
    params: tuple[tuple[str, str], ...] = ()
    content: bytes | None = None
    content_type: str = ""
    files: tuple[Part, ...] = ()

    @property
    def endpoint(self) -> str:
        """The path with the parameters that choose what runs (level, view)."""
        chosen = [f"{k}={v}" for k, v in self.params if k in ("level", "view")]
        return self.path + (f"?{chosen[0]}" if chosen else "")

    def send(self, client: httpx.Client, timeout: float) -> httpx.Response:
        """Send it with `client`, at most `timeout` seconds per network operation."""
        if self.files:
            return client.post(
                self.path, params=self.params, files=list(self.files), timeout=timeout
            )
        return client.post(
            self.path,
            params=self.params,
            content=self.content,
            headers={"Content-Type": self.content_type},
            timeout=timeout,
        )

    def describe(self) -> str:
        """A one-line account of the request (sizes, not bytes)."""
        query = "&".join(f"{k}={v}" for k, v in self.params)
        where = self.path + (f"?{query}" if query else "")
        if self.files:
            parts = ", ".join(f"{n}={f[0]}:{len(f[1])}B:{f[2]}" for n, f in self.files)
            return f"POST {where} multipart[{parts}]"
        size = len(self.content or b"")
        return f"POST {where} Content-Type={self.content_type!r} body={size}B"


@dataclass(frozen=True)
class Mutant:
    """A mutated payload, how it was made, and the request that carries it."""

    index: int
    base: str
    form: str
    steps: tuple[str, ...]
    payload: bytes
    request: Request

    def describe(self) -> str:
        """Index, base program, form and mutation steps."""
        return f"#{self.index} {self.form} of {self.base}: " + " | ".join(self.steps)


_MEDIA = {"archive": "application/zip", "document": "application/json"}
_VIEWS = ("modules", "module-graph", "stages", "partitions", "operators", "weights", "nope")
_ENDPOINTS = {
    "archive": (
        ("serialize", 3.0),
        ("validate-schema", 1.0),
        ("validate-semantic", 2.0),
        ("validate-torch", 1.5),
        ("canonicalize", 2.0),
        ("deserialize", 1.5),
        ("inspect", 1.5),
        ("diff", 1.0),
        ("compat", 1.0),
    ),
    "document": (
        ("serialize", 0.2),
        ("validate-schema", 1.0),
        ("validate-semantic", 2.0),
        ("validate-torch", 1.5),
        ("canonicalize", 2.0),
        ("deserialize", 1.5),
        ("inspect", 1.5),
        ("diff", 1.0),
        ("compat", 1.0),
    ),
}


#: Every endpoint a mutant can be sent to (`--focus` picks some).
ENDPOINTS = tuple(e for e, _ in _ENDPOINTS["archive"])


def make_mutant(
    corpus: Corpus,
    seed: int,
    index: int,
    marker_dir: Path,
    focus: tuple[str, ...] = (),
) -> Mutant:
    """Mutant number `index` of the campaign `seed`, sent to one of the `focus` endpoints (any
    when empty); its payloads would touch a file in `marker_dir` if anything ever ran them."""
    rng = random.Random(f"pt2serde-fuzz/{seed}/{index}")
    ctx = Context(rng, str(marker_dir / f"m{index}"))
    base = rng.choice(corpus.names)
    form = "archive" if rng.random() < 0.6 else "document"
    if form == "archive":
        payload, steps = _archive(ctx, corpus, base)
    else:
        payload, steps = _document(ctx, corpus, base)
    request, notes = _request(ctx, corpus, base, form, payload, focus)
    return Mutant(index, base, form, (*steps, *notes), payload, request)


def _archive(ctx: Context, corpus: Corpus, base: str) -> tuple[bytes, list[str]]:
    members = list(corpus.members[base])
    steps: list[str] = []
    roll = ctx.rng.random()
    if roll < 0.8:
        for _ in range(ctx.rng.choice([1, 1, 1, 2])):
            described = ctx.rng.choice(zipmut.CONTENT)(ctx, members)
            if described is not None:
                steps.append(described)
    if roll >= 0.7:
        data, structural = zipmut.zip_structure(ctx, members)
        return data, [*steps, *structural]
    deflate = ctx.rng.random() < 0.2
    return zipmut.honest(members, deflate), [*steps, "deflated" if deflate else "stored"]


def _document(ctx: Context, corpus: Corpus, base: str) -> tuple[bytes, list[str]]:
    doc = orjson.loads(corpus.documents[base])
    steps = jsonmut.mutate_value(ctx, doc, ctx.rng.choice([1, 1, 1, 2, 3]))
    data = jsonmut.dump(ctx, doc)
    if ctx.rng.random() < 0.15:
        data, how = jsonmut.mutate_bytes(ctx, data)
        steps.append(how)
    return data, steps


def _safetensors(ctx: Context, data: bytes) -> tuple[bytes, str]:
    """Weights for deserialize: the base's own, or with a mutated header or length."""
    roll = ctx.rng.random()
    if roll < 0.7:
        return data, "own weights"
    (length,) = struct.unpack_from("<Q", data)
    header = orjson.loads(data[8 : 8 + length])
    body = data[8 + length :]
    if roll < 0.9:
        steps = jsonmut.mutate_value(ctx, header, 1)
        new = jsonmut.dump(ctx, header)
        return struct.pack("<Q", len(new)) + new + body, "weights header: " + "; ".join(steps)
    lie = ctx.rng.choice([0, length - 1, length + 1, 2**40, 2**64 - 1])
    return struct.pack("<Q", lie) + data[8:], f"weights length {lie}"


def _body(ctx: Context, form: str, payload: bytes, field: str) -> Request:
    """A single payload as a raw body (declared, sniffed or mislabelled) or a form part."""
    roll = ctx.rng.random()
    if roll < 0.6:
        return Request("", content=payload, content_type=_MEDIA[form])
    if roll < 0.7:
        return Request("", content=payload, content_type="application/octet-stream")
    if roll < 0.75:
        wrong = ctx.rng.choice(["text/plain", "application/json", "application/zip", "", "a/b"])
        return Request("", content=payload, content_type=wrong)
    name = "model.pt2" if form == "archive" else "model.json"
    media = ctx.rng.choice([_MEDIA[form], "application/octet-stream", ""])
    return Request("", files=((field, (name, payload, media)),))


def _request(
    ctx: Context, corpus: Corpus, base: str, form: str, payload: bytes, focus: tuple[str, ...]
) -> tuple[Request, list[str]]:
    rng = ctx.rng
    table = [(e, w) for e, w in _ENDPOINTS[form] if not focus or e in focus]
    endpoint = rng.choices([e for e, _ in table], [w for _, w in table])[0]
    params: list[tuple[str, str]] = []
    if rng.random() < 0.05:
        params.append(("model", rng.choice(["model", "nope", ""])))
    if endpoint.startswith("validate"):
        params.append(("level", endpoint.removeprefix("validate-")))
        body = _body(ctx, form, payload, rng.choice(["file", "document"]))
        return Request(
            "/v1/validate", tuple(params), body.content, body.content_type, body.files
        ), []
    if endpoint == "inspect":
        params.append(("view", rng.choice(_VIEWS)))
        params += _inspect_knobs(ctx)
    if endpoint == "serialize" and rng.random() < 0.2:
        params.append(("weights", "safetensors"))
    if endpoint in ("serialize", "canonicalize", "inspect", "compat"):
        body = _body(ctx, form, payload, "file")
        return Request(
            f"/v1/{endpoint}", tuple(params), body.content, body.content_type, body.files
        ), []
    name = "model.pt2" if form == "archive" else "model.json"
    if endpoint == "diff":
        original = corpus.archives[base] if form == "archive" else corpus.documents[base]
        sides = [("old", (name, original, _MEDIA[form])), ("new", (name, payload, _MEDIA[form]))]
        if rng.random() < 0.3:
            sides = [("old", sides[1][1]), ("new", sides[0][1])]
        if rng.random() < 0.3:
            params.append(("format", "text"))
        return Request("/v1/diff", tuple(params), files=tuple(sides)), []
    parts: list[Part] = [("document", (name, payload, _MEDIA[form]))]
    notes: list[str] = []
    if form == "document" or rng.random() < 0.3:
        weights, how = _safetensors(ctx, corpus.weights[base])
        parts.append(("weights", ("weights.safetensors", weights, "application/octet-stream")))
        notes.append(how)
    return Request("/v1/deserialize", tuple(params), files=tuple(parts)), notes


def _inspect_knobs(ctx: Context) -> list[tuple[str, str]]:
    rng = ctx.rng
    knobs: list[tuple[str, str]] = []
    if rng.random() < 0.3:
        knobs.append(("depth", str(rng.choice([-1, 0, 1, 3, 1000, 1001]))))
    if rng.random() < 0.3:
        knobs.append(("stages", str(rng.choice([0, 1, 2, 7, 10_000, 10_001]))))
    if rng.random() < 0.2:
        knobs.append(("by", rng.choice(["param_bytes", "nodes", "bogus"])))
    for _ in range(rng.choice([0, 0, 1, 2])):
        supported = ["aten.relu", "aten.conv2d", "aten", "pt2zoo", "torch.ops.aten.add.Tensor", "x"]
        knobs.append(("supported", rng.choice(supported)))
    if rng.random() < 0.2:
        knobs.append(("allow_single_node", rng.choice(["true", "false", "maybe"])))
    return knobs
