"""Write the rules of the running torch release: one gzip JSON file (`app/releases/data/`).

Runs by path in any venv that holds torch, nothing else (the release venvs hold torch and
numpy): `<venv>/bin/python app/bridge/release_dump.py <out.json.gz>`; `make releases-rules` runs
it in each release's venv through `app.releases.generate`. It records what that release does,
never what we believe of it:

- the schema version its serializer writes (`torch._export.serde.schema.SCHEMA_VERSION`);
- its reader's policy, probed: a tiny program is exported and serialized by this release, then
  deserialized again with an unknown key (at the top and in a node), an unknown union arm,
  an unknown enum value, or its cond node's result written as torch 2.6 writes it (a list,
  untagged); each either loads ("skip") or fails ("fatal");
- the pytree type names its treespec reader knows; the archive layout its `torch.export.save`
  writes, and whether its `torch.export.load` reads the legacy layout of 2.6 and 2.7;
- the operator registry (`opset_dump`) and the `weights_only` rules (`weights_only_dump`), both
  read in a fresh process that has only loaded that program with `torch.export.load`, which is
  what a consumer's process holds when it reads a program;
- of the Python targets that registry lists (what the writer names and the verifier admits), only
  those this release's reader really builds a node for: each is probed by a node naming it, put
  into the probe program and deserialized. Up to 2.12 `deserialize_node` has no branch for a
  plain callable (the predispatch vmap functions, autocast, grad mode), so a program naming one
  does not load there, though that release writes it.
"""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import torch
from torch._export.serde import schema as torch_schema
from torch._export.serde import serialize as torch_serde

try:
    from app.bridge import opset_dump, weights_only_dump
except ImportError:  # by path in a release venv, without the app's dependencies: the siblings
    import opset_dump  # type: ignore[import-not-found,no-redef]
    import weights_only_dump  # type: ignore[import-not-found,no-redef]

#: Version of the rules file's layout (`app.releases.FORMAT` reads it).
FORMAT = 2
#: The unknown names the probes write (no release knows them).
_PROBE = "pt2serde_probe"
_AFTER_LOAD = "--after-load"


class _Probed(torch.nn.Module):
    """A linear layer and a `torch.cond`: parameters, a higher-order op and its subgraphs."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        out: torch.Tensor = torch.cond(y.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (y,))
        return out


def rules(archive: Path) -> dict[str, Any]:
    """This release's rules; `archive` receives the probe program as `torch.export.save` writes
    it (the registry is read after loading it)."""
    exported = torch.export.export(_Probed(), (torch.randn(2, 3),))
    torch.export.save(exported, str(archive))
    artifact = torch_serde.serialize(exported)
    doc = json.loads(artifact.exported_program)
    _load(artifact, doc)  # the baseline must load, so a failing probe fails for its change alone
    reader = {name: _probe(artifact, doc, change) for name, change in _CHANGES.items()}
    reader["legacy_archive"] = _legacy_archive(artifact, archive.with_name("legacy.pt2"))
    after_load = subprocess.run(
        [sys.executable, __file__, _AFTER_LOAD, str(archive)],
        check=True,
        stdout=subprocess.PIPE,
        timeout=900,
    )
    loaded = json.loads(after_load.stdout)
    opset = loaded["opset"]
    read = _read_targets(artifact, doc, set(opset["python_targets"]))
    # the list keeps its repeats (a callable the writer meets twice, e.g. operator.add)
    opset["python_targets"] = [name for name in opset["python_targets"] if name in read]
    return {
        "format": FORMAT,
        "release": torch.__version__.split("+")[0],
        "torch": torch.__version__,
        "schema_version": list(torch_schema.SCHEMA_VERSION),
        "source": (
            f"dumped under torch {torch.__version__} by app/bridge/release_dump.py: the registry "
            "after torch.export.load of a probe program, the reader probed by deserializing it "
            "with an unknown key, union arm and enum value, and with a node naming each Python "
            "target"
        ),
        "reader": reader,
        # what its torch.export.save writes: one serialized_exported_program.json (up to 2.7), or
        # the archive of <root>/models/, data/ and archive_format (from 2.8)
        "archive_layout": _layout(archive),
        "opset": opset,
        "weights_only": loaded["weights_only"],
        # the names a treespec's types (and namedtuple contexts) may have for its reader
        "pytree_types": loaded["pytree_types"],
    }


def _load(artifact: Any, doc: dict[str, Any]) -> None:
    changed = torch_serde.SerializedArtifact(
        json.dumps(doc).encode(),
        artifact.state_dict,
        artifact.constants,
        artifact.example_inputs,
    )
    torch_serde.deserialize(changed)


def _probe(artifact: Any, doc: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> Any:
    """ "skip" when the release loads the changed document, else "fatal" with its error."""
    changed = copy.deepcopy(doc)
    change(changed)
    try:
        _load(artifact, changed)
    except Exception as error:  # noqa: BLE001  (any failure to load is the answer)
        return {"policy": "fatal", "error": _said(error)}
    return {"policy": "skip"}


def _said(error: BaseException) -> str:
    """The error and its cause, short: torch's messages repeat whole nodes (and their stack
    traces, which name this checkout's paths)."""
    said = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:120]
    cause = error.__cause__
    return said if cause is None else f"{said} <- {_said(cause)}"


def _layout(archive: Path) -> str:
    with zipfile.ZipFile(archive) as z:
        legacy = "serialized_exported_program.json" in z.namelist()
    return "legacy" if legacy else "pt2"


def _legacy_archive(artifact: Any, path: Path) -> Any:
    """Whether `torch.export.load` reads the layout torch 2.6 and 2.7 save: the serialized
    artifact's four members and a `version` member, at the top of the zip."""
    major, minor = torch_schema.SCHEMA_VERSION
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("serialized_exported_program.json", artifact.exported_program)
        z.writestr("serialized_state_dict.pt", artifact.state_dict)
        z.writestr("serialized_constants.pt", artifact.constants)
        z.writestr("serialized_example_inputs.pt", artifact.example_inputs)
        z.writestr("version", f"{major}.{minor}")
    try:
        torch.export.load(str(path))
    except Exception as error:  # noqa: BLE001  (any failure to load is the answer)
        return {"policy": "fatal", "error": _said(error)}
    return {"policy": "skip"}


class _Built(Exception):  # noqa: N818  (a signal, not an error)
    """The reader got as far as building the probe node's call."""


def _read_targets(artifact: Any, doc: dict[str, Any], names: set[str]) -> set[str]:
    """The Python target names this release's reader turns into a call of that callable."""
    return {name for name in names if _builds_call(artifact, doc, name)}


def _builds_call(artifact: Any, doc: dict[str, Any], name: str) -> bool:
    """Whether deserializing the probe program with a first node naming `name` builds an FX call
    of the callable the writer names so.

    The node has no inputs and one SymInt output: the shape torch's symbolic-operator branch reads
    before it builds its call (its name comes from that output up to 2.12), and one the branch
    for plain callables (from 2.13) does not read before its own. The load stops where the call is
    built: what a real node needs after that (its outputs' values, the verifier's view of its
    arguments) belongs to a call site the probe does not have, while the refusal this is about
    (no branch takes the target) happens before it.
    """
    changed = copy.deepcopy(doc)
    probe = {
        "target": name,
        "inputs": [],
        "outputs": [{"as_sym_int": {"as_name": _PROBE}}],
        "metadata": {},
    }
    changed["graph_module"]["graph"]["nodes"].insert(0, probe)
    # the load fails either way (the probe stops it, or the reader refuses the target): what
    # was built is the answer, not the error
    with _calls_built() as built, suppress(Exception):
        _load(artifact, changed)
    writer = torch_serde.GraphModuleSerializer.__new__(torch_serde.GraphModuleSerializer)
    return bool(built) and writer.serialize_operator(built[0]) == name


@contextmanager
def _calls_built() -> Iterator[list[Any]]:
    """Record the target of the first `call_function` node an FX graph builds, and stop there
    (the probe node is the first node of the program's graph; placeholders come before it)."""
    built: list[Any] = []
    original = torch.fx.Graph.create_node

    def create_node(
        graph: torch.fx.Graph, op: str, target: Any, *args: Any, **kwargs: Any
    ) -> torch.fx.Node:
        if op == "call_function":
            built.append(target)
            raise _Built
        return original(graph, op, target, *args, **kwargs)

    # a wider signature than torch's annotation, and a class attribute on purpose
    torch.fx.Graph.create_node = create_node  # type: ignore[method-assign,assignment]
    try:
        yield built
    finally:
        torch.fx.Graph.create_node = original  # type: ignore[method-assign]


def _first_node(doc: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = doc["graph_module"]["graph"]["nodes"][0]
    return node


def _top_key(doc: dict[str, Any]) -> None:
    doc[_PROBE] = 1


def _node_key(doc: dict[str, Any]) -> None:
    _first_node(doc)[_PROBE] = 1


def _arm(doc: dict[str, Any]) -> None:
    argument = _first_node(doc)["inputs"][0]["arg"]
    (value,) = argument.values()
    argument.clear()
    argument[f"as_{_PROBE}"] = value


def _enum(doc: dict[str, Any]) -> None:
    meta = next(iter(doc["graph_module"]["graph"]["tensor_values"].values()))
    meta["dtype"] = 999


def _hop_list_output(doc: dict[str, Any]) -> None:
    """The cond node as torch 2.6 writes it: its one result as a list, no
    `is_hop_single_tensor_return` (releases reading 8.7+ take the absent flag for a single
    tensor and fail on the list)."""
    [node] = [n for n in doc["graph_module"]["graph"]["nodes"] if n["target"].endswith(".cond")]
    (output,) = node["outputs"]
    if "as_tensor" in output:
        node["outputs"] = [{"as_tensors": [output["as_tensor"]]}]
    node.pop("is_hop_single_tensor_return", None)


_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "unknown_key": _top_key,
    "unknown_node_key": _node_key,
    "unknown_arm": _arm,
    "unknown_enum_value": _enum,
    "hop_list_output": _hop_list_output,
}


def _after_load(archive: Path) -> dict[str, Any]:
    torch.export.load(str(archive))
    return {
        "opset": opset_dump.registry(),
        "weights_only": weights_only_dump.rules(),
        "pytree_types": sorted(torch.utils._pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE),
    }


def dump(out: Path) -> None:
    """Write the rules as gzip-compressed JSON: sorted keys, zero mtime (reproducible bytes)."""
    with tempfile.TemporaryDirectory() as scratch:
        data = rules(Path(scratch) / "probe.pt2")
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    out.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def main(argv: list[str]) -> int:
    """`<out.json.gz>`: write the rules; `--after-load <archive>`: the registry part, as JSON."""
    if len(argv) == 2 and argv[0] == _AFTER_LOAD:
        sys.stdout.write(json.dumps(_after_load(Path(argv[1])), sort_keys=True))
        return 0
    if len(argv) != 1:
        sys.stderr.write("usage: python app/bridge/release_dump.py <out.json.gz>\n")
        return 2
    dump(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
