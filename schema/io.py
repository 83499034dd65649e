"""Reading and writing documents: bytes <-> models, errors as coded issues with paths."""

from __future__ import annotations

import gc
import types
import typing
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, ClassVar, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from schema._base import Arm, OneOf, Struct, WireName
from schema._fast import fast_validator
from schema._wire import fragments, layout, wire_of, write_as_fragment, write_natively
from schema.description import field_annotation, union_arms
from schema.errors import DocumentInvalid, Issue, pointer
from schema.models import ExportedProgram, TensorMeta

M = TypeVar("M", bound=BaseModel)

_CODES = {
    "missing": "missing-field",
    "enum": "unknown-enum-value",
    "extra_forbidden": "unknown-field",
    "json_invalid": "invalid-json",
    "json_type": "invalid-json",
    "recursion_loop": "too-deep",
}


@dataclass(frozen=True)
class Read(Generic[M]):
    """A validated document and what its bytes carried beyond or short of the schema."""

    document: M
    #: JSON pointers of the keys the schema does not declare (kept in the models' extras).
    unknown_fields: list[str]

    @cached_property
    def filled(self) -> list[str]:
        """``Struct.field`` of each field some struct omitted and its default filled, sorted.

        Worked out on demand from the structs' fields-set: only upgrades ask, and noting it
        while validating cost a Python call per struct with defaults (every node, every
        named argument) on every read.
        """
        found: set[str] = set()
        _omitted(self.document, found)
        return sorted(found)


def _omitted(value: Any, found: set[str]) -> None:
    if isinstance(value, BaseModel):
        if isinstance(value, Struct):
            name = type(value).__name__
            found.update(
                f"{name}.{field}" for field in value.__defaulted__ - value.model_fields_set
            )
        for item in value.__dict__.values():
            _omitted(item, found)
    elif isinstance(value, list):
        for item in value:
            _omitted(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _omitted(item, found)


#: the local header and the empty archive's end record: what every zip starts with
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def not_json(data: bytes | str) -> str | None:
    """What a body that fails as JSON plainly is instead (a zip archive, binary data), said in
    words; None when it looks like text, so that the parser's own complaint stands.

    A JSON parser's message about such bytes ("str is not valid UTF-8: surrogates not allowed")
    names neither the mistake (a .pt2 sent as a document) nor its fix.
    """
    if isinstance(data, str):
        return None
    if data.startswith(_ZIP_MAGIC):
        return "this is a zip archive (a .pt2?), not a JSON document: send it as application/zip"
    head = data[:256]
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start + 4 < len(head):  # not a character cut at the head's end
            return f"binary data, not a JSON document: byte {exc.start} is not UTF-8 text"
    return None


def read(data: bytes | str, model: type[M] = ExportedProgram) -> Read[M]:  # type: ignore[assignment]
    """Parse and validate a document; DocumentInvalid lists every problem with its path.

    The first pass forbids unknown keys, so that a document without any (the common case) is
    known to have none without walking the models; it runs the same models, trying each union's
    common arm before its Python discriminator (see `schema._fast`). A document it refuses is
    read again by the models' own validator: forbidding unknown keys for their pointers, then
    keeping them.
    """
    with no_cycle_collection():
        try:
            # the validator itself: model_validate_json's wrappers cost a small document 5%
            return Read(fast_validator(model).validate_json(data, extra="forbid"), [])
        except ValidationError:
            pass
        try:
            return Read(model.__pydantic_validator__.validate_json(data, extra="forbid"), [])
        except ValidationError as exc:
            first = exc
        try:
            doc = model.model_validate_json(data)
        except ValidationError as exc:
            what = not_json(data)
            if what is not None:
                raise DocumentInvalid([Issue("invalid-json", "", what)]) from None
            raise DocumentInvalid(issues_from(exc, model)) from None
        unknown = [i.path for i in issues_from(first, model) if i.code == "unknown-field"]
        return Read(doc, unknown)


class no_cycle_collection:  # noqa: N801 - used as a function: `with no_cycle_collection():`
    """Pause the cyclic garbage collector while many acyclic models are built; then restore it.

    The models form no cycles, so the collector finds nothing in them, yet on large graphs its
    repeated walks over them cost more than building them (validation, canonicalizing, diffs).
    On the way out the objects made meanwhile move to the oldest generation (freeze, then
    unfreeze: a list splice), so that the first young collection after the block does not
    walk them all at once; they are still freed by reference counting as usual. That splice
    would also thaw whatever the caller froze (`make bench` freezes its heap), so once the
    process is seen to hold frozen objects the block only pauses collection and resumes it.
    (A class, not a generator: it wraps every read, and a small document's read is a tenth of
    a millisecond.)
    """

    __slots__ = ("enabled",)

    #: Whether a caller's frozen objects were seen: counting them walks them all, so they are
    #: counted only until then (an empty count is free).
    caller_froze: ClassVar[bool] = False

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if not no_cycle_collection.caller_froze:
            if gc.get_freeze_count():
                no_cycle_collection.caller_froze = True
            else:
                gc.freeze()
                gc.unfreeze()
        if self.enabled:
            gc.enable()


def load(data: bytes | str, model: type[M] = ExportedProgram) -> M:  # type: ignore[assignment]
    """Parse and validate a document; DocumentInvalid lists every problem with its path."""
    return read(data, model).document


def dump(doc: BaseModel) -> bytes:
    """A document's JSON bytes in torch's wire form (field order, enums as ints, float strings).

    orjson writes the models' own `__dict__`s (fields in declaration order, as pydantic's
    serializer does): most models without calling back at all (see `schema._wire`), the
    others through their `__wire__` (a tensor meta, shared between tensors, is written once
    per call and its bytes reused). Anything that route cannot write exactly (extra keys, a
    field left unset, an int past 64 bits, a lone surrogate) makes orjson raise, and pydantic's
    serializer writes the document instead.
    """
    try:
        with fragments(0):
            return orjson.dumps(doc, default=wire_of)
    except orjson.JSONEncodeError:
        return doc.__pydantic_serializer__.to_json(doc)


def dump_sorted(doc: BaseModel) -> bytes | None:
    """`dump` with every object's keys sorted, or None where only pydantic can write `doc`.

    orjson does not sort the keys of what it writes natively, so here every model goes through
    the callback, which reads a natively written model's `__dict__` without a Python frame.
    """
    option = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
    try:
        with fragments(option):
            return orjson.dumps(doc, default=wire_of, option=option)
    except orjson.JSONEncodeError:
        return None


def _write_natively() -> None:
    """Mark the models orjson can write from their `__dict__` (see `schema._wire`): all but
    those with a field that admits a float."""
    pending: list[type[BaseModel]] = [Struct, Arm]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls not in (Struct, Arm) and not layout(cls)[1]:
            write_natively(cls)
    # A document's tensor metas are its most numerous models, but few distinct ones are shared
    # between its ~1k tensors (see `TensorMetas`): writing each once per dump pays.
    write_as_fragment(TensorMeta)


def issues_from(exc: ValidationError, root: Any) -> list[Issue]:
    """Translate pydantic's errors into our codes and JSON pointers, one issue per problem."""
    issues: dict[tuple[str, str], Issue] = {}
    for err in exc.errors(include_url=False):
        path, at_float = _walk(err["loc"], root)
        code, message = _describe(err, at_float)
        issues.setdefault((path, code), Issue(code, path, message))
    return list(issues.values())


def _describe(err: Any, at_float: bool) -> tuple[str, str]:
    kind = err["type"]
    if at_float:
        return "wrong-type", "expected a number or one of 'Infinity', '-Infinity', 'NaN'"
    if kind == "union_arm":
        return _union_problem(err)
    if kind == "enum":
        return "unknown-enum-value", f"{err['input']!r} is not a known value: {err['msg']}"
    if kind in _CODES:
        return _CODES[kind], err["msg"]
    return "wrong-type", f"{err['msg']} (got {_short(err.get('input'))})"


def _union_problem(err: Any) -> tuple[str, str]:
    ctx = err.get("ctx") or {}
    union, arms = ctx.get("union", "union"), ctx.get("arms", "")
    value = err.get("input")
    if not isinstance(value, dict):
        return (
            "wrong-type",
            f"{union} must be an object with one key of: {arms} (got {_short(value)})",
        )
    if not value:
        return "union-no-arm", f"{union} has no key; expected exactly one of: {arms}"
    if len(value) > 1:
        keys = ", ".join(sorted(map(str, value)))
        return (
            "union-many-arms",
            f"{union} has {len(value)} keys ({keys}); expected exactly one of: {arms}",
        )
    key = next(iter(value))
    return "union-unknown-arm", f"{key!r} is not an arm of {union}; allowed: {arms}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _walk(loc: tuple[int | str, ...], root: Any) -> tuple[str, bool]:
    """Map pydantic's loc to a JSON pointer: drop union tags and union-member labels."""
    parts: list[str | int] = []
    t: Any = root
    for seg in loc:
        t = _unwrap(t)
        if isinstance(t, OneOf | WireName):
            if isinstance(t, WireName):
                return pointer(parts), True
        marker = _one_of(t)
        if marker is not None:
            arms = {arm.__tag__: arm for arm in union_arms(t)[1]}
            if seg in arms:
                t = arms[seg]
                continue
            parts.append(seg)
            t = Any
            continue
        if _is_wire_float(t):
            return pointer(parts), True
        parts.append(seg)
        if isinstance(t, type) and issubclass(t, Struct | Arm):
            info = t.model_fields.get(str(seg))
            t = field_annotation(info) if info is not None else Any
        elif typing.get_origin(t) is list:
            t = typing.get_args(t)[0]
        elif typing.get_origin(t) is dict:
            t = typing.get_args(t)[1]
        else:
            t = Any
    return pointer(parts), _is_wire_float(_unwrap(t))


def _unwrap(t: Any) -> Any:
    """Strip Optional[...] and plain Annotated wrappers, keeping OneOf and WireName ones."""
    while True:
        origin = typing.get_origin(t)
        args = typing.get_args(t)
        if origin is Annotated and not any(isinstance(m, OneOf | WireName) for m in t.__metadata__):
            t = args[0]
        elif origin in (typing.Union, types.UnionType) and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            if len(rest) != 1:
                return t
            t = rest[0]
        else:
            return t


def _one_of(t: Any) -> OneOf | None:
    if typing.get_origin(t) is Annotated:
        for meta in t.__metadata__:
            if isinstance(meta, OneOf):
                return meta
    return None


def _is_wire_float(t: Any) -> bool:
    return typing.get_origin(t) is Annotated and any(
        isinstance(m, WireName) for m in t.__metadata__
    )


def unknown_fields(doc: BaseModel) -> list[str]:
    """JSON pointers of every key the document carries that its schema does not declare."""
    found: list[str] = []
    _collect(doc, [], found)
    return found


def _collect(value: Any, path: list[str | int], found: list[str]) -> None:
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _collect(getattr(value, name), [*path, name], found)
        for key in value.__pydantic_extra__ or {}:
            found.append(pointer([*path, key]))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, BaseModel | list | dict):
                _collect(item, [*path, i], found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, BaseModel | list | dict):
                _collect(item, [*path, key], found)


_write_natively()
