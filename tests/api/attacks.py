"""Uploads built to exhaust the server, each within every default limit: a JSON document of a
million keys, a .pt2 whose graph is a chain of 100k nodes, and a multipart body of 200k parts."""

from __future__ import annotations

import copy
import json
from typing import Any

import torch

from tests.registry.conftest import rewrite_member
from tests.zoo import archive_bytes, torch_json


def million_keys_document(keys: int = 1_000_000) -> bytes:
    """A document whose top level carries `keys` unknown keys (about 12 bytes each)."""
    head = b'{"schema_version":{"major":8,"minor":20}'
    return head + b"".join(b',"k%d":0' % i for i in range(keys)) + b"}"


def _relu_document() -> dict[str, Any]:
    program = torch.export.export(torch.nn.ReLU(), (torch.randn(4, 3),))
    doc: dict[str, Any] = json.loads(torch_json(program))
    return doc


def chain_document(nodes: int, base: dict[str, Any] | None = None) -> bytes:
    """torch's document of relu, its one node repeated `nodes` times as a chain (about 460 bytes
    a node)."""
    doc = copy.deepcopy(base or _relu_document())
    graph = doc["graph_module"]["graph"]
    (node,) = graph["nodes"]
    # its stack trace would take the document past the JSON member limit
    node["metadata"].pop("stack_trace", None)
    node["name"] = node["outputs"][0]["as_tensor"]["name"] = "@OUT@"
    node["inputs"][0]["arg"]["as_tensor"]["name"] = "@IN@"
    meta = json.dumps(graph["tensor_values"].pop("relu"))
    # one template filled in per node: a deep copy a node would take a minute
    template = json.dumps(node).replace("%", "%%").replace("@IN@", "%s").replace("@OUT@", "%s")
    names = ["input", *(f"relu_{i}" for i in range(nodes))]
    last = names[-1]
    graph["nodes"] = graph["tensor_values"]["@NODES@"] = "@NODES@"
    graph["outputs"] = [{"as_tensor": {"name": last}}]
    doc["graph_module"]["signature"]["output_specs"] = [
        {"user_output": {"arg": {"as_tensor": {"name": last}}}}
    ]
    node_list = ",".join(template % (names[i], names[i + 1], names[i + 1]) for i in range(nodes))
    values = ",".join(f'"{name}":{meta}' for name in names[1:])
    text = json.dumps(doc)
    text = text.replace('"nodes": "@NODES@"', f'"nodes": [{node_list}]')
    text = text.replace('"@NODES@": "@NODES@"', values)
    return text.encode()


def chain_program(nodes: int) -> tuple[bytes, bytes]:
    """The document of a `nodes` chain, and torch.export.save's archive of relu with its
    document replaced by it."""
    program = torch.export.export(torch.nn.ReLU(), (torch.randn(4, 3),))
    document = chain_document(nodes, json.loads(torch_json(program)))
    archive = rewrite_member(archive_bytes(program), "models/model.json", lambda _: document)
    return document, archive


def many_parts(boundary: str, parts: int) -> bytes:
    """A multipart form of `parts` small parts of distinct names."""
    piece = f'--{boundary}\r\nContent-Disposition: form-data; name="p%d"\r\n\r\nx\r\n'.encode()
    return b"".join(piece % i for i in range(parts)) + f"--{boundary}--\r\n".encode()
