"""torch's verdict on .pt2 archives, one line of JSON per archive (run by test_differential).

`python -m tests.bridge.differential_worker <jobs.json> <results.jsonl>`: jobs is a list of
`[id, path]`; each result line is `{"id", "valid", "reason", "seconds"}`, written as soon as it
is known so that a crash loses only the archive that caused it.

valid means torch takes the document as written: `torch.export.load` builds it, every argument a
node names is one torch's schema of the operator has (its loader silently drops the others, so it
would have loaded a different program), and the loaded program runs on its sample inputs
(kernels check what loading does not: argument types, required keyword arguments).
"""

from __future__ import annotations

import json
import sys
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import torch

from tests.zoo import register_custom_ops


def _graphs(graph: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield graph
    for node in graph["nodes"]:
        for named in node["inputs"]:
            sub = named["arg"].get("as_graph")
            if sub is not None:
                yield from _graphs(sub["graph"])


def _dropped_arguments(document: dict[str, Any]) -> str | None:
    for graph in _graphs(document["graph_module"]["graph"]):
        for node in graph["nodes"]:
            parts = node["target"].split(".")
            if len(parts) != 5 or parts[:2] != ["torch", "ops"]:
                continue
            op: Any = torch.ops
            for part in parts[2:]:
                op = getattr(op, part)
            names = {a.name for a in op._schema.arguments}
            for named in node["inputs"]:
                if named["name"] not in names:
                    return f"{node['target']} has no argument {named['name']!r}"
    return None


def judge(path: str) -> tuple[bool, str]:
    """torch's verdict on one archive and why."""
    try:
        ep = torch.export.load(path)
        with zipfile.ZipFile(path) as archive:
            (member,) = [n for n in archive.namelist() if "/models/" in n and n.endswith(".json")]
            dropped = _dropped_arguments(json.loads(archive.read(member)))
        if dropped is not None:
            return False, f"loaded without an argument: {dropped}"
        args, kwargs = ep.example_inputs
        ep.module()(*args, **kwargs)
    except Exception as exc:  # every failure of torch's is its verdict
        return False, f"{type(exc).__name__}: {str(exc)[:300]}"
    return True, ""


def main(jobs_path: str, results_path: str) -> None:
    """Judge every job, appending one result line per archive."""
    register_custom_ops()
    with open(jobs_path) as f:
        jobs = json.load(f)
    with open(results_path, "a") as out:
        for job_id, path in jobs:
            start = time.perf_counter()
            valid, reason = judge(path)
            seconds = time.perf_counter() - start
            line = {"id": job_id, "valid": valid, "reason": reason, "seconds": seconds}
            out.write(json.dumps(line) + "\n")
            out.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
