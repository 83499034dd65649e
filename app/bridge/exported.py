"""Live torch ExportedPrograms <-> documents and raw tensors, through torch's own (de)serializer."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import orjson
import torch
from torch._export.serde import schema as torch_schema
from torch._export.serde import serialize as torch_serde
from torch.export import ExportedProgram as ExportedProgram  # also app.client's type of a program

import schema
from app import files
from app.archive.pt2 import SAMPLE_INPUTS
from app.archive.raw import RawTensor, StreamedTensor, TensorKind
from app.archive.tensors import dtype_name
from app.archive.writer import Sink, write_archive
from app.bridge.standins import stand_ins
from app.bridge.torch_schema import to_torch
from app.failure import BridgeFailure, ProblemCode, is_allocation_failure
from app.programs.for_release import for_release
from app.programs.screen import refuse_if_unsafe, screen
from app.programs.semantics import unused_ranges
from app.settings import Limits
from app.tensors.views import (
    MappedTensor,
    Stored,
    View,
    by_name,
    checked_views,
    shape_of,
    view_of,
)
from schema import (
    Device,
    InputSpecBuffer,
    InputSpecCustomObj,
    InputSpecParameter,
    InputSpecTensorConstant,
    Issue,
    Layout,
    ScalarType,
    SymIntAsExpr,
    SymIntAsInt,
    TensorMeta,
)
from schema.errors import pointer

Route = Literal["fast", "torch"]


#: The screen's settings here, the defaults and never the environment: archive pickles are
#: the callers' concern, not the document's.
_SCREEN = Limits()
_SPACES = re.compile(r"\s+")
#: Where torch's "Failed deserializing node" message starts quoting its cause's traceback.
_EMBEDDED_TRACEBACK = "\n Original exception "
#: Causes we recognise in torch's words, and what to do about them.
_HINTS: tuple[tuple[str, str], ...] = (
    (
        "in pytree is not registered",
        "a pytree type is named outside the module call signatures' treespecs, where "
        "pt2serde registers stand-ins; load it where its defining library is installed",
    ),
    (
        "Can't deserialize TreeSpec of namedtuple",
        "a namedtuple type is named outside the module call signatures' treespecs, where "
        "pt2serde registers stand-ins; load it where its defining library is installed",
    ),
    (
        "'_OpNamespace'",
        "an operator namespace is missing from the worker: set PT2SERDE_WORKER_IMPORTS to "
        "the module that registers it",
    ),
)


@dataclass(frozen=True)
class SerializedProgram:
    """A program as data: its document, its tensors by name, and torch's own JSON bytes."""

    doc: schema.ExportedProgram
    tensors: dict[str, RawTensor]
    json: bytes


@dataclass(frozen=True)
class Slot:
    """Where the signature puts a named tensor: its role and the graph value that reads it."""

    name: str
    role: Literal["parameter", "buffer", "constant"]
    value: str
    persistent: bool


def serialize(ep: ExportedProgram) -> SerializedProgram:
    """The document (torch's serializer, validated by our models) and raw tensors of `ep`."""
    tensors = _raw_tensors(ep)
    try:
        artifact = torch_serde.serialize(
            ep,
            serialize_state_dict=False,
            serialize_constants=False,
            serialize_example_inputs=False,
        )
    except MemoryError:
        raise
    except Exception as exc:
        raise _torch_failure("torch-serialize-failed", exc) from None
    try:
        doc: schema.ExportedProgram = schema.load(artifact.exported_program)
    except schema.DocumentInvalid as exc:
        raise BridgeFailure(
            "torch-document-invalid",
            f"torch wrote a document our schema rejects: {exc}",
            exc.issues,
        ) from None
    return SerializedProgram(doc, tensors, artifact.exported_program)


def deserialize(
    doc: schema.ExportedProgram,
    tensors: Mapping[str, Stored] | Iterable[Stored],
    *,
    route: Route = "fast",
) -> ExportedProgram:
    """A real ExportedProgram from a document and its tensors, built by torch's deserializer.

    Nothing is unpickled: tensors are made from raw bytes and example inputs are left out; a
    pickled payload (a tensor subclass) is stood in for by a zero tensor of its meta, which
    proves the program builds but is not its value (the archive we write carries the payload).
    `route` picks how torch's schema dataclasses are made: "fast" builds them from our models,
    "torch" re-parses the JSON with torch's own `_bytes_to_dataclass`. Pytree types this process
    has not registered are stood in for while torch builds (`app.bridge.standins`): the program
    checks and saves, but running it needs the real types registered.
    """
    named = by_name(tensors)
    slots = signature_slots(doc)
    check_weights(doc, named, slots)
    views = checked_views(named.values())
    # torch sympifies expressions, execs guards and imports treespec types: screen first.
    refuse_if_unsafe(screen(doc, _SCREEN))
    state_dict: dict[str, torch.Tensor] = {}
    constants: dict[str, torch.Tensor] = {}
    kinds = saved_kinds(doc, named, slots)
    bases: dict[tuple[int, ScalarType], torch.Tensor] = {}
    try:
        for name, raw in named.items():
            kind = kinds[name]
            tensor = (
                _stand_in(name, raw.meta, parameter=kind == "parameter")
                if raw.pickled
                else _tensor(raw, views[name], bases, parameter=kind == "parameter")
            )
            # torch.export.load hands torch the archive's weights as the state dict and its
            # constants (non-persistent buffers and lifted constants among them) as constants,
            # tensors no input spec names included: so do we.
            (constants if kind == "constant" else state_dict)[name] = tensor
        serialized = (
            to_torch(doc)
            if route == "fast"
            else torch_serde._bytes_to_dataclass(torch_schema.ExportedProgram, schema.dump(doc))
        )
        # The user's pytree types get stand-ins while torch builds (their modules are never
        # imported); the program keeps them, and what is written back names the real types.
        with stand_ins(doc):
            program: ExportedProgram = torch_serde.ExportedProgramDeserializer().deserialize(
                serialized, state_dict, constants, None
            )
    except MemoryError:
        raise
    except Exception as exc:
        raise _torch_failure("torch-deserialize-failed", exc) from None
    return program


def write_pt2(
    doc: schema.ExportedProgram,
    tensors: Mapping[str, RawTensor] | Iterable[RawTensor],
    target: Path | IO[bytes],
) -> ExportedProgram:
    """Build the program with torch (the proof that it loads), then write the .pt2
    torch.export.save writes for it, with our own writer; returns the program.

    torch.export.save would serialize the whole graph again (and canonicalize a copy of it, as
    a check), which costs about as much as building it; the document we already hold is what
    it would write (`saved_document`), and the tensors are the bytes we were given. A path is
    replaced atomically; nothing is written when torch cannot build the program.
    """
    named = by_name(tensors)
    program = deserialize(doc, named)
    write_built(doc, named, target)
    return program


def write_built(
    doc: schema.ExportedProgram,
    tensors: Mapping[str, RawTensor | StreamedTensor],
    target: Path | Sink,
    sample_inputs: bytes | None = None,
    for_torch: str | None = None,
) -> None:
    """Write the .pt2 of the program torch builds from `doc` and `tensors` (see `write_pt2`),
    with the given (proven) sample inputs: it depends on nothing torch makes, so it may be
    written while torch builds, and kept only once it has (streamed tensors are checked against
    their source's CRC as they pass)."""
    samples = {} if sample_inputs is None else {SAMPLE_INPUTS.format("model"): sample_inputs}
    write_archive(
        target,
        {"model": saved_document(doc, for_torch)},
        _saved_tensors(doc, tensors),
        opaque_members=samples,
    )


def saved_document(doc: schema.ExportedProgram, for_torch: str | None = None) -> bytes:
    """The document as torch.export.save writes it for the program torch builds from `doc`.

    torch 2.13 writes its serializer's output (the canonical form is only computed as a check),
    formatted by `json.dumps`: ", " and ": " separators, ASCII only. Its serializer fills the
    value maps as it meets each value's definition (graph inputs, then node outputs) and
    re-derives each value's TensorMeta from the fake tensor the loader made, which the loader
    makes with `empty_strided`, knowing no storage offset: every value's offset comes out 0.
    Its loader drops a range whose symbol the graph does not use (`unused_ranges`), so the
    program it builds never writes one. The rest of the document comes out as it went in (the
    bridge tests compare with torch's own save on every zoo program, the benchmark on its
    decoders). With `for_torch`, the document is the one that older torch release reads
    (`for_release`, which the caller has already seen succeed).
    """
    data = (
        orjson.loads(schema.dump(doc)) if for_torch is None else for_release(doc, for_torch)[1].tree
    )
    _as_torch_serializes(data["graph_module"]["graph"])
    for key in unused_ranges(doc):
        data["range_constraints"].pop(key, None)
    return json.dumps(data, allow_nan=False).encode()


#: A graph's value maps, which torch's serializer fills as it meets each value's definition.
_VALUE_MAPS = (
    "tensor_values",
    "sym_int_values",
    "sym_bool_values",
    "custom_obj_values",
    "sym_float_values",
)


def _as_torch_serializes(graph: dict[str, Any]) -> None:
    """Value maps in the order torch's serializer defines values (graph inputs, then each node's
    outputs), every value's storage offset 0; subgraphs alike."""
    order = _defined(graph["inputs"])
    for node in graph["nodes"]:
        for named in node["inputs"]:
            subgraph = named["arg"].get("as_graph")
            if subgraph is not None:
                _as_torch_serializes(subgraph["graph"])
        order += _defined(node["outputs"])
    for key in _VALUE_MAPS:
        values = graph.get(key)
        if values:
            graph[key] = {n: values[n] for n in dict.fromkeys(order) if n in values} | values
    for meta in graph["tensor_values"].values():
        meta["storage_offset"] = {"as_int": 0}


def _defined(arguments: Any) -> list[str]:
    """The value names a list of arguments defines, in order (nested lists included)."""
    names: list[str] = []
    if isinstance(arguments, list):
        for item in arguments:
            names += _defined(item)
    elif isinstance(arguments, dict):
        for key, value in arguments.items():
            if key in ("name", "as_name") and isinstance(value, str):
                names.append(value)
            else:
                names += _defined(value)
    return names


def _saved_tensors(
    doc: schema.ExportedProgram, named: Mapping[str, RawTensor | StreamedTensor]
) -> list[RawTensor | StreamedTensor]:
    """The tensors where torch.export.save puts them (`saved_kinds`)."""
    kinds = saved_kinds(doc, named)
    return [dataclasses.replace(t, kind=kinds[name]) for name, t in named.items()]


def saved_kinds(
    doc: schema.ExportedProgram,
    named: Mapping[str, Stored | StreamedTensor],
    slots: list[Slot] | None = None,
) -> dict[str, TensorKind]:
    """Each tensor's kind as torch.export.save stores it: parameters and persistent buffers with
    the weights (the state dict), non-persistent buffers and lifted constants with the
    constants. A tensor no input spec names (a parameter strict export kept though the graph
    never reads it, the second name of an aliased constant) keeps the kind it was stored with,
    as torch.export.load keeps it."""
    kinds: dict[str, TensorKind] = {
        slot.name: "parameter"
        if slot.role == "parameter"
        else "buffer"
        if slot.role == "buffer" and slot.persistent
        else "constant"
        for slot in (signature_slots(doc) if slots is None else slots)
    }
    return {name: kinds.get(name, t.kind) for name, t in named.items()}


def signature_slots(doc: schema.ExportedProgram) -> list[Slot]:
    """The tensors the signature binds to parameters, buffers, constants; refuses script objects."""
    slots: list[Slot] = []
    refused: list[Issue] = []
    for i, spec in enumerate(doc.graph_module.signature.input_specs):
        if isinstance(spec, InputSpecParameter):
            p = spec.parameter
            slots.append(Slot(p.parameter_name, "parameter", p.arg.name, True))
        elif isinstance(spec, InputSpecBuffer):
            b = spec.buffer
            slots.append(Slot(b.buffer_name, "buffer", b.arg.name, b.persistent))
        elif isinstance(spec, InputSpecTensorConstant):
            c = spec.tensor_constant
            slots.append(Slot(c.tensor_constant_name, "constant", c.arg.name, False))
        elif isinstance(spec, InputSpecCustomObj):
            refused.append(
                Issue(
                    "bridge-unsupported-constant",
                    pointer(["graph_module", "signature", "input_specs", i, "custom_obj"]),
                    f"script object {spec.custom_obj.custom_obj_name!r} "
                    f"({spec.custom_obj.arg.class_fqn}) cannot be built without unpickling",
                )
            )
    if refused:
        raise BridgeFailure(
            "bridge-unsupported-constant",
            "programs with script-object constants are not supported",
            refused,
        )
    return slots


def check_weights(
    doc: schema.ExportedProgram,
    tensors: Mapping[str, Stored],
    slots: list[Slot] | None = None,
) -> None:
    """BridgeFailure `weights-mismatch` lists every missing or mismatched tensor."""
    issues = weight_issues(doc, tensors, slots)
    if issues:
        raise BridgeFailure(
            "weights-mismatch",
            f"{len(issues)} tensor(s) do not match the program's signature",
            issues,
        )


def weight_issues(
    doc: schema.ExportedProgram,
    tensors: Mapping[str, Stored],
    slots: list[Slot] | None = None,
) -> list[Issue]:
    """Missing and dtype/shape-mismatched tensors, in signature order."""
    slots = signature_slots(doc) if slots is None else slots
    values = doc.graph_module.graph.tensor_values
    issues: list[Issue] = []
    for slot in slots:
        path = pointer([slot.name])
        expected = values.get(slot.value)
        raw = tensors.get(slot.name)
        if raw is None:
            described = f" ({_describe(expected)})" if expected is not None else ""
            issues.append(
                Issue("weight-missing", path, f"{slot.role} {slot.name!r}{described} has no tensor")
            )
            continue
        if expected is None:
            continue
        if raw.meta.dtype != expected.dtype:
            issues.append(
                Issue(
                    "weight-dtype",
                    path,
                    f"expected dtype {dtype_name(expected.dtype)}, "
                    f"got {dtype_name(raw.meta.dtype)}",
                )
            )
        if not _same_shape(expected.sizes, raw.meta.sizes):
            issues.append(
                Issue(
                    "weight-shape",
                    path,
                    f"expected shape {shape_of(expected)}, got {shape_of(raw.meta)}",
                )
            )
    # a tensor no spec names is not a mismatch: torch.export.load keeps it (`saved_kinds`)
    return issues


def pt2_bytes(ep: ExportedProgram) -> bytes:
    """The .pt2 archive torch.export.save writes for `ep`."""
    buffer = io.BytesIO()
    try:
        torch.export.save(ep, buffer)
    except MemoryError:
        raise
    except Exception as exc:
        raise _torch_failure("torch-save-failed", exc) from None
    return buffer.getvalue()


def save_pt2(ep: ExportedProgram, target: Path) -> None:
    """torch.export.save to `target` atomically: a temporary file beside it, then a rename."""
    try:
        with files.atomic_writer(target) as handle:
            torch.export.save(ep, handle)
    except (MemoryError, OSError):
        raise
    except Exception as exc:
        raise _torch_failure("torch-save-failed", exc) from None


def load_pt2_trusted(path: Path) -> ExportedProgram:
    """torch.export.load, which unpickles: ONLY for archives we wrote ourselves (tests)."""
    program: ExportedProgram = torch.export.load(path)
    return program


def tensor_meta(tensor: torch.Tensor) -> TensorMeta:
    """The TensorMeta torch's serializer writes for `tensor` (concrete sizes only)."""
    return TensorMeta(
        dtype=ScalarType(torch_serde._TORCH_TO_SERIALIZE_DTYPE[tensor.dtype].value),
        sizes=[SymIntAsInt(as_int=int(s)) for s in tensor.shape],
        requires_grad=tensor.requires_grad,
        device=Device(type=tensor.device.type, index=tensor.device.index),
        strides=[SymIntAsInt(as_int=int(s)) for s in tensor.stride()],
        storage_offset=SymIntAsInt(as_int=int(tensor.storage_offset())),
        layout=Layout(torch_serde._TORCH_TO_SERIALIZE_LAYOUT[tensor.layout].value),
    )


def storage_bytes(tensor: torch.Tensor) -> bytes:
    """All bytes of the tensor's storage, as torch.export.save writes them for a weight."""
    storage = tensor.untyped_storage()
    if storage.nbytes() == 0:
        return b""
    if storage.device.type != "cpu":
        storage = storage.cpu()  # type: ignore[no-untyped-call]
    flat = torch.empty(0, dtype=torch.uint8).set_(storage)
    data: bytes = flat.numpy().tobytes()
    return data


def _raw_tensors(ep: ExportedProgram) -> dict[str, RawTensor]:
    tensors: dict[str, RawTensor] = {}
    refused: list[Issue] = []
    for name, value in ep.state_dict.items():
        kind: TensorKind = "parameter" if isinstance(value, torch.nn.Parameter) else "buffer"
        tensors[name] = _raw_tensor(name, kind, value)
    for name, value in ep.constants.items():
        if isinstance(value, torch.Tensor):
            tensors[name] = _raw_tensor(name, "constant", value)
        else:
            refused.append(
                Issue(
                    "bridge-unsupported-constant",
                    pointer([name]),
                    f"constant of type {type(value).__name__} is not a tensor",
                )
            )
    if refused:
        raise BridgeFailure(
            "bridge-unsupported-constant",
            "programs with script-object constants are not supported",
            refused,
        )
    return tensors


def _raw_tensor(name: str, kind: TensorKind, tensor: torch.Tensor) -> RawTensor:
    plain = type(tensor) in (torch.Tensor, torch.nn.Parameter) and type(tensor.data) is torch.Tensor
    if not plain or tensor.layout != torch.strided or tensor.device.type == "meta":
        raise BridgeFailure(
            "bridge-unsupported-tensor",
            f"{name!r} ({type(tensor).__name__}, {tensor.layout}, {tensor.device}) "
            "is not a plain strided tensor with data",
        )
    return RawTensor(name, kind, tensor_meta(tensor), storage_bytes(tensor))


def _tensor(
    raw: Stored,
    view: View,
    bases: dict[tuple[int, ScalarType], torch.Tensor],
    *,
    parameter: bool,
) -> torch.Tensor:
    """The tensor over its storage bytes; tensors given the same bytes object (tied weights,
    views of one storage) share one torch storage, kept in `bases`, as torch.export.load's do."""
    dtype = torch_serde._SERIALIZE_TO_TORCH_DTYPE[torch_schema.ScalarType(raw.meta.dtype.value)]
    key = (id(raw.data), raw.meta.dtype)
    base = bases.get(key)
    if base is None:
        if isinstance(raw, MappedTensor) and raw.data:
            # a private mapping is writable (buffers are mutated in place) and never copied here
            base = torch.frombuffer(raw.data, dtype=dtype)
        elif raw.data:
            # A writable copy: buffers are mutated in place; frombuffer warns on read-only bytes.
            base = torch.frombuffer(bytearray(raw.data), dtype=dtype)
        else:
            base = torch.empty(0, dtype=dtype)
        bases[key] = base
    return _placed(base.as_strided(view.sizes, view.strides, view.offset), raw.meta, parameter)


def _stand_in(name: str, meta: TensorMeta, *, parameter: bool) -> torch.Tensor:
    """Zeros with a pickled tensor's dtype, geometry and device, for torch to build on (one of
    another layout, e.g. sparse, has none: refused alike by validation and deserialize)."""
    view, issues = view_of(name, meta)
    if view is None:
        raise BridgeFailure("tensor-data-invalid", issues[0].message, issues)
    dtype = torch_serde._SERIALIZE_TO_TORCH_DTYPE[torch_schema.ScalarType(meta.dtype.value)]
    zeros = torch.zeros(view.extent, dtype=dtype)
    return _placed(zeros.as_strided(view.sizes, view.strides, view.offset), meta, parameter)


def _placed(tensor: torch.Tensor, meta: TensorMeta, parameter: bool) -> torch.Tensor:
    """A CPU tensor moved to the meta's device, as a parameter or not, needing grad or not."""
    device = meta.device
    if device.type != "cpu":
        where = (
            torch.device(device.type)
            if device.index is None
            else torch.device(device.type, device.index)
        )
        tensor = tensor.to(where)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=meta.requires_grad)
    if meta.requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _same_shape(
    expected: list[SymIntAsExpr | SymIntAsInt], actual: list[SymIntAsExpr | SymIntAsInt]
) -> bool:
    if len(expected) != len(actual):
        return False
    return all(
        isinstance(e, SymIntAsExpr) or (isinstance(a, SymIntAsInt) and a.as_int == e.as_int)
        for e, a in zip(expected, actual, strict=True)
    )


def _describe(meta: TensorMeta) -> str:
    return f"{dtype_name(meta.dtype)}{shape_of(meta)}"


def _torch_failure(code: ProblemCode, exc: BaseException) -> BaseException:
    if is_allocation_failure(exc):
        return MemoryError(torch_message(exc))
    return BridgeFailure(code, torch_message(exc))


def torch_message(exc: BaseException) -> str:
    """A torch exception's whole message with the exceptions it was raised from, on one line,
    and a hint where we know the cause."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        # torch's deserializer appends the cause's traceback to its own message; the cause
        # itself follows as the next part.
        text = str(current).split(_EMBEDDED_TRACEBACK, 1)[0]
        line = _SPACES.sub(" ", text).strip()
        parts.append(line if current is exc else f"{type(current).__name__}: {line}")
        current = current.__cause__
    message = "; caused by ".join(parts)
    hints = [hint for marker, hint in _HINTS if marker in message]
    return " ".join([message, *(f"(hint: {hint})" for hint in hints)])
