"""The pickle machine's vocabulary: what a simulated pickle is made of (`Global` names and
`Instance` objects), the bounds it runs under, the `Policy` that decides what each opcode may do,
the refusal, and the opcode table of protocols 0-5.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.failure import Failure


class PickleRefused(Failure):
    """A pickle the machine refuses: unreadable, over a bound, or outside the policy."""

    def __init__(self, message: str) -> None:
        super().__init__("unsafe-pickle", message)


@dataclass(frozen=True)
class Global:
    """A global a pickle names (`module.name`), never resolved."""

    module: str
    name: str

    @property
    def path(self) -> str:
        """`module.name`, the spelling torch's allowlist uses."""
        return f"{self.module}.{self.name}"


@dataclass(eq=False)
class Instance:
    """An object a call or a persistent load would make: its Python type and what we know of it.

    Identity is its equality, as for the tensors, storages and mutable containers it stands for.
    """

    type: str
    #: dtype name for tensors and storages, the known value for others (a Size's dims, say)
    detail: Any = None
    #: the entries of mapping objects (OrderedDict, Counter) that SETITEM(S) writes
    items: dict[Any, Any] | None = None
    #: element count of a storage or a tensor
    numel: int = 0
    hashable: bool = True


@dataclass(frozen=True)
class PickleLimits:
    """Bounds that keep any pickle's simulation small."""

    max_ops: int = 100_000
    max_stack: int = 50_000
    max_marks: int = 1_000
    max_memo: int = 50_000
    max_depth: int = 100


class Policy:
    """What a pickle may do; each hook refuses with `PickleRefused` or returns the result."""

    #: the opcodes this policy runs (None: every opcode)
    opcodes: frozenset[str] | None = None

    def refused_opcode(self, name: str) -> str:
        """Why an opcode outside `opcodes` is refused."""
        return f"{name} is not allowed"

    def global_(self, module: str, name: str) -> Any:
        """The value GLOBAL, STACK_GLOBAL or INST pushes for `module.name`."""
        return Global(module, name)

    def call(self, func: Any, args: Any) -> Any:
        """What REDUCE makes of `func(*args)`."""
        return Instance("?call")

    def new(self, cls: Any, args: Any, kwargs: Any) -> Any:
        """What NEWOBJ, NEWOBJ_EX, OBJ and INST make of `cls.__new__(cls, *args)`."""
        return Instance("?new")

    def build(self, inst: Any, state: Any) -> None:
        """BUILD: `inst` takes `state`."""

    def persistent(self, pid: Any) -> Any:
        """What PERSID and BINPERSID load for `pid`."""
        return Instance("?persistent")

    def extension(self, code: int) -> Any:
        """What EXT1/2/4 push for an extension-registry code."""
        return Global("?extension", str(code))

    def buffer(self) -> Any:
        """What NEXT_BUFFER pushes (out-of-band buffers)."""
        return Instance("?buffer", hashable=False)

    def append_target(self, target: Any, op: str) -> None:
        """APPEND(S) on `target` (a list, or whatever the policy lets extend)."""

    def setitem_target(self, target: Any, op: str) -> None:
        """SETITEM(S) on `target`."""

    def additems_target(self, target: Any) -> None:
        """ADDITEMS on `target`."""

    def setitem(self, target: Any, key: Any, value: Any) -> None:
        """Store one item; the machine has checked that `key` is hashable."""
        if isinstance(target, dict):
            target[key] = value
        elif isinstance(target, Instance) and target.items is not None:
            target.items[key] = value

    def decode_short_binstring(self, raw: bytes) -> Any:
        """SHORT_BINSTRING/BINSTRING/STRING values (the unpickler's `encoding`)."""
        return raw.decode("ascii")


@dataclass
class Survey(Policy):
    """Lets every opcode run symbolically and records the globals the pickle names."""

    globals: list[str] = field(default_factory=list)

    def global_(self, module: str, name: str) -> Any:
        """Record `module.name`."""
        self.globals.append(f"{module}.{name}")
        return Global(module, name)

    def extension(self, code: int) -> Any:
        """Record an extension code, which names a global from the loader's registry."""
        self.globals.append(f"?extension-registry:{code}")
        return Global("?extension", str(code))


def describe(value: Any) -> str:
    """A short, bounded name for a value in a refusal (never its whole repr)."""
    if isinstance(value, Global):
        return f"global {value.path}"
    if isinstance(value, Instance):
        return f"a {value.type} object"
    if value is None or isinstance(value, bool):
        return repr(value)
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def hashable(value: Any) -> bool:
    """Whether Python could hash `value` (the machine bounds tuples' depth, so this ends)."""
    if isinstance(value, (list, dict, set, bytearray)):
        return False
    if isinstance(value, Instance):
        return value.hashable
    if isinstance(value, (tuple, frozenset)):
        return all(hashable(v) for v in value)
    return True


#: every opcode of protocols 0-5, by byte
OPCODES: dict[int, str] = {
    ord(code): name
    for code, name in [
        ("(", "MARK"),
        (".", "STOP"),
        ("0", "POP"),
        ("1", "POP_MARK"),
        ("2", "DUP"),
        ("F", "FLOAT"),
        ("I", "INT"),
        ("J", "BININT"),
        ("K", "BININT1"),
        ("L", "LONG"),
        ("M", "BININT2"),
        ("N", "NONE"),
        ("P", "PERSID"),
        ("Q", "BINPERSID"),
        ("R", "REDUCE"),
        ("S", "STRING"),
        ("T", "BINSTRING"),
        ("U", "SHORT_BINSTRING"),
        ("V", "UNICODE"),
        ("X", "BINUNICODE"),
        ("a", "APPEND"),
        ("b", "BUILD"),
        ("c", "GLOBAL"),
        ("d", "DICT"),
        ("}", "EMPTY_DICT"),
        ("e", "APPENDS"),
        ("g", "GET"),
        ("h", "BINGET"),
        ("i", "INST"),
        ("j", "LONG_BINGET"),
        ("l", "LIST"),
        ("]", "EMPTY_LIST"),
        ("o", "OBJ"),
        ("p", "PUT"),
        ("q", "BINPUT"),
        ("r", "LONG_BINPUT"),
        ("s", "SETITEM"),
        ("t", "TUPLE"),
        (")", "EMPTY_TUPLE"),
        ("u", "SETITEMS"),
        ("G", "BINFLOAT"),
        ("\x80", "PROTO"),
        ("\x81", "NEWOBJ"),
        ("\x82", "EXT1"),
        ("\x83", "EXT2"),
        ("\x84", "EXT4"),
        ("\x85", "TUPLE1"),
        ("\x86", "TUPLE2"),
        ("\x87", "TUPLE3"),
        ("\x88", "NEWTRUE"),
        ("\x89", "NEWFALSE"),
        ("\x8a", "LONG1"),
        ("\x8b", "LONG4"),
        ("B", "BINBYTES"),
        ("C", "SHORT_BINBYTES"),
        ("\x8c", "SHORT_BINUNICODE"),
        ("\x8d", "BINUNICODE8"),
        ("\x8e", "BINBYTES8"),
        ("\x8f", "EMPTY_SET"),
        ("\x90", "ADDITEMS"),
        ("\x91", "FROZENSET"),
        ("\x92", "NEWOBJ_EX"),
        ("\x93", "STACK_GLOBAL"),
        ("\x94", "MEMOIZE"),
        ("\x95", "FRAME"),
        ("\x96", "BYTEARRAY8"),
        ("\x97", "NEXT_BUFFER"),
        ("\x98", "READONLY_BUFFER"),
    ]
}

OPCODE_NAMES: frozenset[str] = frozenset(OPCODES.values())
