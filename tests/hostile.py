"""Hostile archives built from real ones: each would run code, read files or load native code in
a trusting loader. Every payload tries to create a marker file; none may ever appear."""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.archive.zipcraft import FIXED_TIME, rezip

ROOT = "archive"
DOCUMENT = f"{ROOT}/models/model.json"
WEIGHTS_CONFIG = f"{ROOT}/data/weights/model_weights_config.json"
CONSTANTS_CONFIG = f"{ROOT}/data/constants/model_constants_config.json"
SAMPLE_INPUTS = f"{ROOT}/data/sample_inputs/model.pt"


class _Payload:
    """Unpickling this runs a shell command (we only ever dump it)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (self.command,))


def evil_pickle(marker: Path) -> bytes:
    """A pickle whose loading would create `marker`."""
    return pickle.dumps({"x": _Payload(f"touch {marker}")}, protocol=2)


@dataclass(frozen=True)
class Hostile:
    """One hostile archive: what it carries and the code it must be refused with."""

    name: str
    code: str
    build: Callable[[dict[str, bytes], Path], bytes]


def _zip(archives: dict[str, bytes], base: str, **changes: Any) -> bytes:
    return rezip(archives[base], **changes)


def _document(archives: dict[str, bytes], base: str, mutate: Callable[[Any], None]) -> bytes:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(archives[base])) as zf:
        doc = orjson.loads(zf.read(DOCUMENT))
    mutate(doc)
    return rezip(archives[base], replace={DOCUMENT: orjson.dumps(doc)})


def _config(archives: dict[str, bytes], base: str, member: str) -> Any:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(archives[base])) as zf:
        return orjson.loads(zf.read(member))


def _short_unicode(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 256
    return b"\x8c" + bytes([len(raw)]) + raw


def decoy_pickle(marker: Path) -> bytes:
    """`posix.system('touch <marker>')` behind decoy strings naming an allowed global: PROTO 2,
    'posix', 'system', 'torch._utils', '_rebuild_tensor_v2', POP, POP, STACK_GLOBAL (which takes
    'posix' and 'system'), the command, TUPLE1, REDUCE, STOP."""
    return b"".join(
        [
            b"\x80\x02",
            *(_short_unicode(t) for t in ("posix", "system", "torch._utils", "_rebuild_tensor_v2")),
            b"00\x93",
            _short_unicode(f"touch {marker}"),
            b"\x85R.",
        ]
    )


def torch_save_zip(pickled: bytes) -> bytes:
    """A zip laid out as `torch.save` writes one, holding `pickled` as its data.pkl."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for name, data in (
            ("data.pkl", pickled),
            ("byteorder", b"little"),
            ("version", b"3\n"),
            (".data/serialization_id", b"0"),
        ):
            target.writestr(zipfile.ZipInfo(f"sample/{name}", FIXED_TIME), data)
    return out.getvalue()


#: Sample inputs whose loading would create the marker: never refused (sample inputs are no
#: reason to refuse a program), always left out of what is written and served.
SAMPLE_INPUT_PAYLOADS: dict[str, Callable[[Path], bytes]] = {
    "reduce-os-system": evil_pickle,
    "decoy-stack-global": lambda marker: torch_save_zip(decoy_pickle(marker)),
}


def with_sample_inputs(archive: bytes, payload: bytes) -> bytes:
    """`archive` (one model named "model") with its sample inputs replaced by `payload`."""
    return rezip(archive, replace={SAMPLE_INPUTS: payload})


def _pickled_weight(archives: dict[str, bytes], marker: Path) -> bytes:
    config = _config(archives, "conv", WEIGHTS_CONFIG)
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    member = f"{ROOT}/data/weights/{first['path_name']}"
    return _zip(
        archives,
        "conv",
        replace={WEIGHTS_CONFIG: orjson.dumps(config), member: evil_pickle(marker)},
    )


def _opaque_constant(archives: dict[str, bytes], marker: Path) -> bytes:
    config = _config(archives, "constants", CONSTANTS_CONFIG)
    config["config"]["payload"] = {
        "path_name": "opaque_obj_0",
        "is_param": False,
        "use_pickle": True,
        "tensor_meta": None,
    }
    return _zip(
        archives,
        "constants",
        replace={CONSTANTS_CONFIG: orjson.dumps(config)},
        add={f"{ROOT}/data/constants/opaque_obj_0": evil_pickle(marker)},
    )


def _expression(archives: dict[str, bytes], marker: Path) -> bytes:
    def mutate(doc: Any) -> None:
        meta = next(iter(doc["graph_module"]["graph"]["tensor_values"].values()))
        meta["sizes"][0] = {
            "as_expr": {"expr_str": f"__import__('os').system('touch {marker}')", "hint": None}
        }

    return _document(archives, "dynamic", mutate)


def _guards(archives: dict[str, bytes], marker: Path) -> bytes:
    def mutate(doc: Any) -> None:
        doc["guards_code"] = [f"import os; os.system('touch {marker}')"]

    return _document(archives, "dynamic", mutate)


def _treespec(archives: dict[str, bytes], marker: Path) -> bytes:
    enum_dict = {
        "type": "builtins.dict",
        "context": json.dumps([{"__enum__": True, "fqn": "os:system", "name": str(marker)}]),
        "children_spec": [{"type": None, "context": None, "children_spec": []}],
    }
    spec = [1, {"type": "builtins.tuple", "context": "null", "children_spec": [enum_dict]}]

    def mutate(doc: Any) -> None:
        doc["graph_module"]["module_call_graph"][0]["signature"]["in_spec"] = json.dumps(spec)

    return _document(archives, "conv", mutate)


def _with_treespec_node(archives: dict[str, bytes], node: dict[str, Any]) -> bytes:
    """The conv program with `node` in its input treespec."""
    spec = [1, {"type": "builtins.tuple", "context": "null", "children_spec": [node]}]

    def mutate(doc: Any) -> None:
        doc["graph_module"]["module_call_graph"][0]["signature"]["in_spec"] = json.dumps(spec)

    return _document(archives, "conv", mutate)


def _enum_behind_nan(archives: dict[str, bytes], marker: Path) -> bytes:
    """A user type's context only Python's json reads (NaN): torch's enum hook imports the
    module its second element names, however the rest of the load goes."""
    enum = json.dumps({"__enum__": True, "fqn": "os:system", "name": f"touch {marker}"})
    node = {"type": "mylib.Output", "context": f"[NaN, {enum}]", "children_spec": []}
    return _with_treespec_node(archives, node)


def _placeholder_type(archives: dict[str, bytes], marker: Path) -> bytes:
    """torch's name for a type registered without one, which resolves to whichever registered
    last (its context then goes through torch's enum hook)."""
    node = {"type": "NO_SERIALIZED_TYPE_NAME_FOUND", "context": "[]", "children_spec": []}
    return _with_treespec_node(archives, node)


def _native(archives: dict[str, bytes], marker: Path) -> bytes:
    return _zip(archives, "conv", add={f"{ROOT}/data/aotinductor/model.so": b"\x7fELF" + bytes(64)})


def _from_file(archives: dict[str, bytes], marker: Path) -> bytes:
    def mutate(doc: Any) -> None:
        node = doc["graph_module"]["graph"]["nodes"][0]
        node["target"] = "torch.ops.aten.from_file.default"

    return _document(archives, "conv", mutate)


def _first_node_calls(
    target: str, inputs: Callable[[Any], list[dict[str, Any]]]
) -> Callable[[dict[str, bytes], Path], bytes]:
    """A builder of the conv program whose first node calls `target` with the inputs made
    from that node's first input."""

    def build(archives: dict[str, bytes], marker: Path) -> bytes:
        def mutate(doc: Any) -> None:
            node = doc["graph_module"]["graph"]["nodes"][0]
            node["target"] = target
            node["inputs"] = inputs(node["inputs"][0]["arg"])

        return _document(archives, "conv", mutate)

    return build


def _arg(name: str, arg: Any, kind: int = 1) -> dict[str, Any]:
    return {"name": name, "arg": arg, "kind": kind}


#: A view 4 KiB past its input's storage, which inductor's primitive builds unchecked.
_reinterpret_tensor = _first_node_calls(
    "torch.ops.inductor._reinterpret_tensor.default",
    lambda tensor: [
        _arg("self", tensor),
        _arg("size", {"as_ints": [1024]}),
        _arg("stride", {"as_ints": [1]}),
        _arg("offset_increment", {"as_int": 1024}),
    ],
)
#: torch's inline-assembly operator: CUDA code in the document, compiled and run.
_inline_asm = _first_node_calls(
    "torch.ops.higher_order.inline_asm_elementwise",
    lambda tensor: [
        _arg("", tensor),
        _arg("asm_str", {"as_string": "trap;"}, 2),
        _arg("constraints", {"as_string": "=r,r"}, 2),
        _arg("dtype", {"as_scalar_type": 7}, 2),
    ],
)
#: segment_reduce told to skip its checks: run, it reads past its input as far as its lengths
#: say.
_unsafe_segments = _first_node_calls(
    "torch.ops.aten.segment_reduce.default",
    lambda tensor: [
        _arg("data", tensor),
        _arg("reduce", {"as_string": "sum"}),
        _arg("lengths", tensor, 2),
        _arg("unsafe", {"as_bool": True}, 2),
    ],
)
#: The Python function torch writes for a custom autograd Function: run, it imports the module
#: its first argument names and calls that module's attribute's `apply`.
_autograd_function_import = _first_node_calls(
    "torch.export.custom_ops._call_custom_autograd_function_in_pre_dispatch",
    lambda tensor: [_arg("", {"as_string": "antigravity.webbrowser"}), _arg("", tensor)],
)


def _print_environment(archives: dict[str, bytes], marker: Path) -> bytes:
    """torch's print operator with a format that walks from its tensor to `os.environ`: the
    program would print the secrets of whoever runs it."""
    walk = "{0.__reduce_ex__.__func__.__globals__[torch].os.environ}"

    def mutate(doc: Any) -> None:
        nodes = doc["graph_module"]["graph"]["nodes"]
        tensor = nodes[0]["inputs"][0]["arg"]
        printing = {
            "target": "torch.ops.higher_order.print",
            "inputs": [
                {"name": "", "arg": {"as_string": walk}, "kind": 1},
                {"name": "", "arg": tensor, "kind": 1},
            ],
            "outputs": [{"as_none": True}],
            "metadata": {},
            "is_hop_single_tensor_return": False,
            "name": "print_1",
        }
        nodes.insert(0, printing)

    return _document(archives, "conv", mutate)


def _hidden_directory(archives: dict[str, bytes], marker: Path) -> bytes:
    """Two archives in one: the clean program's directory and end record, whose comment holds
    a second directory and end record listing the same names with a pickle for sample inputs.
    torch's zip reader, like Python's, takes the last end record it finds: the hidden one."""
    import struct
    import zipfile

    from tests.archive.zipcraft import central_header, end_record, local_header, stored

    def members(data: bytes) -> list[Any]:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return [stored(name, zf.read(name)) for name in zf.namelist()]

    hidden = members(with_sample_inputs(archives["conv"], evil_pickle(marker)))
    shown = members(archives["conv"])
    body, offsets = bytearray(), []
    for member in hidden + shown:
        offsets.append(len(body))
        body += local_header(member) + member.stored
    directory = b"".join(map(central_header, shown, offsets[len(hidden) :]))
    hidden_at = len(body) + len(directory) + 22
    hidden_directory = b"".join(map(central_header, hidden, offsets))
    # one byte after the hidden end record: its comment length (0) does not reach the end
    comment = hidden_directory + end_record(len(hidden), len(hidden_directory), hidden_at) + b"-"
    end = struct.pack(
        "<4sHHHHIIH",
        b"PK\x05\x06",
        0,
        0,
        len(shown),
        len(shown),
        len(directory),
        len(body),
        len(comment),
    )
    return bytes(body) + directory + end + comment


def _case_twin(archives: dict[str, bytes], marker: Path) -> bytes:
    """A second model, "MODEL", beside "model": one name to torch's zip reader, which answers
    a lookup of model.pt with MODEL.pt, a pickle that runs when loaded."""
    import zipfile

    with zipfile.ZipFile(io.BytesIO(archives["conv"])) as zf:
        original = {name: zf.read(name) for name in zf.namelist()}
    twins = {}
    for name, data in original.items():
        folder, _, base = name.rpartition("/")
        if base.startswith("model") and "/data/weights/weight_" not in name:
            twin = f"{folder}/MODEL{base[len('model') :]}"
            twins[twin] = evil_pickle(marker) if name == SAMPLE_INPUTS else data
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for name, data in [*twins.items(), *original.items()]:
            target.writestr(zipfile.ZipInfo(name, FIXED_TIME), data)
    return out.getvalue()


def _python_target(archives: dict[str, bytes], marker: Path) -> bytes:
    def mutate(doc: Any) -> None:
        doc["graph_module"]["graph"]["nodes"][0]["target"] = "torch.os.system"

    return _document(archives, "conv", mutate)


def _dotdot(archives: dict[str, bytes], marker: Path) -> bytes:
    return _zip(archives, "conv", add={f"{ROOT}/../evil.sh": f"touch {marker}".encode()})


def _defaultdict_factory(archives: dict[str, bytes], marker: Path) -> bytes:
    factory = {
        "type": "collections.defaultdict",
        "context": {
            "default_factory_module": "os",
            "default_factory_name": "system",
            "dict_context": [str(marker)],
        },
        "children_spec": [{"type": None, "context": None, "children_spec": []}],
    }
    spec = [1, {"type": "builtins.tuple", "context": "null", "children_spec": [factory]}]

    def mutate(doc: Any) -> None:
        doc["graph_module"]["module_call_graph"][0]["signature"]["in_spec"] = json.dumps(spec)

    return _document(archives, "conv", mutate)


def _custom_object_input(archives: dict[str, bytes], marker: Path) -> bytes:
    arg = {"name": "obj", "class_fqn": "__torch__.torch.classes.os.system"}

    def mutate(doc: Any) -> None:
        graph_module = doc["graph_module"]
        graph_module["graph"]["inputs"].insert(0, {"as_custom_obj": arg})
        graph_module["signature"]["input_specs"].insert(
            0, {"custom_obj": {"arg": arg, "custom_obj_name": f"touch {marker}"}}
        )

    return _document(archives, "conv", mutate)


def _guards_exec(archives: dict[str, bytes], marker: Path) -> bytes:
    def mutate(doc: Any) -> None:
        doc["guards_code"] = [
            "L['x'].size()[0] >= 2",
            f"exec(\"__import__('os').system('touch {marker}')\") is None",
        ]

    return _document(archives, "dynamic", mutate)


def _operator_argument(archives: dict[str, bytes], marker: Path) -> bytes:
    def mutate(doc: Any) -> None:
        node = doc["graph_module"]["graph"]["nodes"][0]
        node["inputs"].append({"name": "hook", "arg": {"as_operator": "builtins.eval"}, "kind": 2})

    return _document(archives, "conv", mutate)


HOSTILE: list[Hostile] = [
    Hostile("use-pickle-weight", "unsafe-pickle", _pickled_weight),
    Hostile("opaque-object", "unsafe-pickle", _opaque_constant),
    Hostile("sympify-expression", "unsafe-expression", _expression),
    Hostile("guards-code", "unsafe-guards-code", _guards),
    Hostile("treespec-enum", "unsafe-treespec", _treespec),
    Hostile("treespec-enum-behind-nan", "unsafe-treespec", _enum_behind_nan),
    Hostile("treespec-placeholder-type", "unsafe-treespec", _placeholder_type),
    Hostile("aotinductor-so", "archive-native-code", _native),
    Hostile("aten-from-file", "unsafe-operator", _from_file),
    Hostile("inductor-reinterpret-tensor", "unsafe-operator", _reinterpret_tensor),
    Hostile("inline-asm", "unsafe-operator", _inline_asm),
    Hostile("unsafe-segment-reduce", "unsafe-operator", _unsafe_segments),
    Hostile("print-environment", "unsafe-format-string", _print_environment),
    Hostile("autograd-function-import", "unsafe-target", _autograd_function_import),
    Hostile("python-target", "unsafe-target", _python_target),
    Hostile("dotdot-member", "archive-bad-name", _dotdot),
    Hostile("hidden-directory", "archive-ambiguous-end", _hidden_directory),
    Hostile("case-twin-model", "archive-duplicate-name", _case_twin),
    Hostile("treespec-defaultdict-factory", "unsafe-treespec", _defaultdict_factory),
    Hostile("custom-object-input", "unsafe-custom-object", _custom_object_input),
    Hostile("guards-code-exec", "unsafe-guards-code", _guards_exec),
    Hostile("operator-argument-eval", "unsafe-target", _operator_argument),
]


_AUDITED = (
    "pickle.find_class",
    "exec",
    "compile",
    "import",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "ctypes.dlopen",
)
_recording: list[tuple[str, str]] | None = None
_owner: int | None = None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _recording is not None and threading.get_ident() == _owner and event.startswith(_AUDITED):
        _recording.append((event, repr(args[:1])[:120]))


_installed = False


@contextmanager
def audited() -> Iterator[list[tuple[str, str]]]:
    """Record, on this thread, every code-running or importing audit event inside the block."""
    global _installed, _recording, _owner
    if not _installed:
        sys.addaudithook(_hook)  # an audit hook cannot be removed: it stays, disarmed
        _installed = True
    events: list[tuple[str, str]] = []
    _recording, _owner = events, threading.get_ident()
    try:
        yield events
    finally:
        _recording, _owner = None, None


#: What a load must never do: unpickle with a trusting unpickler, or start a program.
_RUNS = (
    "pickle.find_class",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
)
_CONSUMER = """
import json, sys, torch
archive, inputs, outputs = sys.argv[1:4]
args, kwargs = torch.load(inputs, weights_only=True)
events, armed = [], False
def hook(event, detail):
    if armed and event.startswith(%r):
        events.append([event, repr(detail[:2])[:200]])
sys.addaudithook(hook)
armed = True
try:
    program = torch.export.load(archive)
except Exception as exc:
    print(json.dumps([events, repr(exc)]))
    sys.exit(0)
armed = False
torch.save((program.module()(*args, **kwargs), program.example_inputs), outputs)
print(json.dumps([events, None]))
"""


@dataclass(frozen=True)
class Consumed:
    """What a trusting consumer's `torch.export.load` of an archive did."""

    #: code-running and unpickling audit events during the load
    events: list[list[str]]
    #: why the load failed (None if it did not)
    error: str | None
    #: the loaded program's outputs on the given inputs
    outputs: Any = None
    #: the loaded program's example inputs (None when the archive has none)
    example_inputs: Any = None


def consume(archive: bytes, args: tuple[Any, ...], kwargs: dict[str, Any], tmp: Path) -> Consumed:
    """Load `archive` with `torch.export.load` in a fresh process, as a consumer of what the
    registry serves would, recording what the load runs, and call the program on the inputs."""
    import subprocess

    import torch

    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "consumed.pt2").write_bytes(archive)
    torch.save((args, kwargs), tmp / "inputs.pt")
    script = _CONSUMER % (_RUNS,)
    done = subprocess.run(
        [sys.executable, "-c", script, *(str(tmp / n) for n in ("consumed.pt2", "inputs.pt"))]
        + [str(tmp / "outputs.pt")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events, error = json.loads(done.stdout.splitlines()[-1])
    if error is not None:
        return Consumed(events, error)
    outputs, example_inputs = torch.load(tmp / "outputs.pt", weights_only=True)
    return Consumed(events, None, outputs, example_inputs)
