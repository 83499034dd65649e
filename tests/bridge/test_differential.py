"""Differential: semantic validation and torch agree on mutants of real documents.

Mutants of the zoo's documents and of two tiny Hugging Face models (operators renamed, overloads
swapped or made up, arguments dropped or renamed, node names and outputs defined twice, values
undefined, schema versions out of range). Ours: `validate_bytes(..., "semantic")`. torch's: the
mutant archive through `torch.export.load`, its own schemas and a run on the sample inputs, in
two worker processes (see differential_worker). Every disagreement is listed in DISAGREEMENTS.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch

from app.programs import opset
from app.programs.validation import validate_bytes
from app.settings import Settings
from tests.realzoo import VOCAB, tiny_hf_model
from tests.zoo import PROGRAM_NAMES, archive_bytes

ROOT = Path(__file__).resolve().parents[2]
Doc = dict[str, Any]
Mutant = tuple[str, Doc]

#: Mutant id -> why torch and we disagree on it. Kept exact: a fixed entry fails the test too.
DISAGREEMENTS: dict[str, str] = {
    "scalar_floats:argument-dropped:2:max": "a kernel-level check: clamp(x, min=None, max=None) "
    "fits the schema (both default to None), the kernel wants one of them",
    "constants:argument-dropped:2:dim": "torch passes the positional arguments after the gap one "
    "place early: slice(x, start, end) loads and runs as slice(x, dim=start, start=end), "
    "a different program",
}

_MIN_MUTANTS = 300
#: torch's time per archive (the summary shows where the time goes)
_SECONDS: dict[str, float] = {}


# ---------------------------------------------------------------- sources


class _Plain(torch.nn.Module):
    """A Hugging Face model returning plain tensors: its ModelOutput stays out of the program, so
    the workers need no transformers to rebuild the output treespec."""

    def __init__(self, model: torch.nn.Module, fields: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.fields = fields

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(ids)
        return tuple(getattr(out, f) for f in self.fields)


def _hugging_face() -> dict[str, bytes]:
    torch.manual_seed(0)
    models = {
        "gpt2": _Plain(tiny_hf_model("gpt2", layers=1), ("logits",)),
        "bert": _Plain(tiny_hf_model("bert", layers=1), ("last_hidden_state", "pooler_output")),
    }
    ids = torch.arange(8).reshape(1, 8) % VOCAB
    return {
        name: archive_bytes(torch.export.export(model.eval(), (ids,)))
        for name, model in models.items()
    }


@pytest.fixture(scope="module")
def sources(archives: dict[str, bytes]) -> dict[str, bytes]:
    """torch.export.save archives of every zoo program and the Hugging Face models."""
    return {**{name: archives[name] for name in PROGRAM_NAMES}, **_hugging_face()}


def _member(archive: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        (name,) = [n for n in z.namelist() if "/models/" in n and n.endswith(".json")]
    return name


def _with_document(archive: bytes, document: bytes) -> bytes:
    """The archive with its program document replaced."""
    member = _member(archive)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, document if info.filename == member else src.read(info))
    return out.getvalue()


# ---------------------------------------------------------------- mutations


def _operator_nodes(doc: Doc) -> list[int]:
    """Indices of top-graph nodes calling an overload torch registers by itself."""
    return [
        i
        for i, node in enumerate(doc["graph_module"]["graph"]["nodes"])
        if node["target"].startswith("torch.ops.")
        and len(node["target"].split(".")) == 5
        and opset.is_builtin_namespace(node["target"].split(".")[2])
    ]


def _mutants(name: str, original: Doc, rng: random.Random, scale: int) -> Iterator[Mutant]:
    ops = _operator_nodes(original)

    def copy() -> tuple[Doc, list[Doc]]:
        doc = orjson.loads(orjson.dumps(original))
        return doc, doc["graph_module"]["graph"]["nodes"]

    def pick(k: int) -> list[int]:
        return sorted(rng.sample(ops, min(k * scale, len(ops))))

    for i in pick(2):
        doc, nodes = copy()
        parts = nodes[i]["target"].split(".")
        nodes[i]["target"] = ".".join([*parts[:3], parts[3] + "_renamed", parts[4]])
        yield f"{name}:op-renamed:{i}", doc
    for i in pick(1):
        doc, nodes = copy()
        nodes[i]["target"] = nodes[i]["target"].rsplit(".", 1)[0] + ".no_such_overload"
        yield f"{name}:overload-made-up:{i}", doc
    for i in pick(3):
        doc, nodes = copy()
        prefix, _, current = nodes[i]["target"].rpartition(".")
        others = [o for o in opset.overloads(*prefix.split(".")[2:4]) if o != current]
        if others:
            other = rng.choice(others)
            nodes[i]["target"] = f"{prefix}.{other}"
            yield f"{name}:overload-swapped:{i}:{other}", doc
    for i in pick(3):
        doc, nodes = copy()
        if nodes[i]["inputs"]:
            j = rng.randrange(len(nodes[i]["inputs"]))
            dropped = nodes[i]["inputs"].pop(j)["name"]
            yield f"{name}:argument-dropped:{i}:{dropped}", doc
    for i in pick(2):
        doc, nodes = copy()
        if nodes[i]["inputs"]:
            named = rng.choice(nodes[i]["inputs"])
            renamed = named["name"]
            named["name"] += "_renamed"
            yield f"{name}:argument-renamed:{i}:{renamed}", doc
    yield from _names(name, original, rng, scale, copy)


def _names(
    name: str,
    original: Doc,
    rng: random.Random,
    scale: int,
    copy: Callable[[], tuple[Doc, list[Doc]]],
) -> Iterator[Mutant]:
    nodes = original["graph_module"]["graph"]["nodes"]
    named = [i for i, node in enumerate(nodes) if node.get("name")]
    for i in sorted(rng.sample(named[1:], min(scale, len(named) - 1))):
        doc, mutated = copy()
        k = rng.choice([k for k in named if k < i])
        mutated[i]["name"] = mutated[k]["name"]
        yield f"{name}:node-name-duplicated:{i}", doc
    tensor_out = [i for i, n in enumerate(nodes) if n["outputs"] and "as_tensor" in n["outputs"][0]]
    for i in sorted(rng.sample(tensor_out[1:], min(scale, len(tensor_out) - 1))):
        doc, mutated = copy()
        k = rng.choice([k for k in tensor_out if k < i])
        mutated[i]["outputs"][0]["as_tensor"]["name"] = nodes[k]["outputs"][0]["as_tensor"]["name"]
        yield f"{name}:output-redefined:{i}", doc
    uses = [
        (i, j)
        for i, n in enumerate(nodes)
        for j, arg in enumerate(n["inputs"])
        if "as_tensor" in arg["arg"]
    ]
    for i, j in sorted(rng.sample(uses, min(2 * scale, len(uses)))):
        doc, mutated = copy()
        mutated[i]["inputs"][j]["arg"]["as_tensor"]["name"] = "undefined_value"
        yield f"{name}:value-undefined:{i}:{j}", doc


_VERSIONS = ((-1, 0), (7, 20), (9, 0), (1000, 0), (0, 0), (8, 999), (8, -5), (-8, 20))


def _version_mutants(name: str, original: Doc) -> Iterator[Mutant]:
    for major, minor in _VERSIONS:
        doc = orjson.loads(orjson.dumps(original))
        doc["schema_version"] = {"major": major, "minor": minor}
        yield f"{name}:version:{major}.{minor}", doc


def _all_mutants(sources: dict[str, bytes]) -> list[tuple[str, str, bytes]]:
    """(id, source name, document bytes) of every mutant and of every unmutated document."""
    out = []
    for name, archive in sources.items():
        with zipfile.ZipFile(io.BytesIO(archive)) as z:
            original = orjson.loads(z.read(_member(archive)))
        out.append((f"{name}:original", name, orjson.dumps(original)))
        rng = random.Random(f"pt2serde-differential-{name}")
        mutants = list(_mutants(name, original, rng, 1))
        # torch refuses most versions before reading the graph: cheap on the small programs
        if name in PROGRAM_NAMES:
            mutants.extend(_version_mutants(name, original))
        out.extend((mutant_id, name, orjson.dumps(doc)) for mutant_id, doc in mutants)
    return out


# ---------------------------------------------------------------- torch's side


def _torch_verdicts(archives: dict[str, Path], tmp_path: Path) -> dict[str, tuple[bool, str]]:
    """Judge every archive in two worker processes; a crash is a verdict on its archive."""
    pending = sorted(archives)
    verdicts: dict[str, tuple[bool, str]] = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    while pending:
        halves = [pending[0::2], pending[1::2]]
        procs = []
        for n, half in enumerate(halves):
            jobs = tmp_path / f"jobs{n}.json"
            jobs.write_text(json.dumps([[i, str(archives[i])] for i in half]))
            results = tmp_path / f"results{n}.jsonl"
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tests.bridge.differential_worker",
                        str(jobs),
                        str(results),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for proc in procs:
            proc.wait(timeout=600)
        for n, half in enumerate(halves):
            results = tmp_path / f"results{n}.jsonl"
            lines = results.read_text().splitlines() if results.exists() else []
            for line in lines:
                result = json.loads(line)
                verdicts[result["id"]] = (result["valid"], result["reason"])
                _SECONDS[result["id"]] = result["seconds"]
            unjudged = [i for i in half if i not in verdicts]
            if unjudged and procs[n].returncode != 0:
                # the first archive without a verdict is the one the worker died on
                verdicts[unjudged[0]] = (False, f"worker died (exit {procs[n].returncode})")
        pending = [i for i in pending if i not in verdicts]
    return verdicts


# ---------------------------------------------------------------- the test


def test_semantic_validation_agrees_with_torch(sources: dict[str, bytes], tmp_path: Path) -> None:
    mutants = _all_mutants(sources)
    assert len([m for m in mutants if not m[0].endswith(":original")]) >= _MIN_MUTANTS
    ids = [mutant_id for mutant_id, _, _ in mutants]
    assert len(set(ids)) == len(ids)
    settings = Settings()
    ours: dict[str, tuple[bool, list[str]]] = {}
    paths: dict[str, Path] = {}
    for n, (mutant_id, name, document) in enumerate(mutants):
        report, _ = validate_bytes(document, "semantic", settings.limits)
        errors = sorted({f.code for f in report.findings if f.severity == "error"})
        ours[mutant_id] = (report.valid, errors)
        paths[mutant_id] = tmp_path / f"m{n}.pt2"
        paths[mutant_id].write_bytes(_with_document(sources[name], document))
    theirs = _torch_verdicts(paths, tmp_path)

    for mutant_id in ids:
        if mutant_id.endswith(":original"):
            assert ours[mutant_id] == (True, []), mutant_id
            assert theirs[mutant_id] == (True, ""), mutant_id
    disagreements = {
        mutant_id: f"ours {ours[mutant_id]}, torch {theirs[mutant_id]}"
        for mutant_id in ids
        if ours[mutant_id][0] != theirs[mutant_id][0]
    }
    kinds = Counter(mutant_id.split(":")[1] for mutant_id in ids)
    invalid = Counter(mutant_id.split(":")[1] for mutant_id in ids if not theirs[mutant_id][0])
    summary = (
        f"{len(ids)} documents {dict(kinds)}; torch refuses {dict(invalid)}; "
        f"torch took {sum(_SECONDS.values()):.0f} s in all"
    )
    assert set(disagreements) == set(DISAGREEMENTS), (summary, disagreements)
    assert len(DISAGREEMENTS) <= 5
