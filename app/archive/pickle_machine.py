"""A pickle machine that never runs a pickle: every opcode of protocols 0-5, simulated on symbols.

The machine keeps pickle's own state (a stack, the stack of marks, the memo, the frame) and
decodes each opcode exactly as CPython's unpickler and torch's `weights_only` unpickler read it,
but it imports nothing and calls nothing: a global is a `Global` name, a call is whatever the
`Policy` says it makes, a persistent id is what the policy says it loads. The policy decides what
is allowed (`weights_only` holds torch's rules; `pickle_symbols.Survey` lets every opcode through
and lists the globals a pickle names). Bounds on operations, stack, marks, memo and tuple nesting
keep a hostile pickle from costing more than a fraction of a second.
"""

from __future__ import annotations

import codecs
import functools
import re
import struct
from collections.abc import Callable
from typing import Any

from app.archive.pickle_symbols import (
    OPCODES,
    Instance,
    PickleLimits,
    PickleRefused,
    Policy,
    describe,
    hashable,
)

_DECIMAL = re.compile(rb"[+-]?[0-9]+")


class Machine:
    """The pickle machine; `run` returns the symbolic object STOP would return."""

    def __init__(
        self,
        data: bytes,
        policy: Policy,
        limits: PickleLimits | None = None,
    ) -> None:
        self.data = data
        self.policy = policy
        self.limits = limits or PickleLimits()
        self.pos = 0
        self.at = 0
        #: where reading must stop: the end of the current frame, else of the pickle
        self.limit = len(data)
        self.framed = False
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.depth_below = 0  # items held in enclosing marks
        self.memo: dict[int, Any] = {}
        self.depths: dict[int, int] = {}
        self.keep: list[Any] = []  # nested tuples, so the ids in `depths` stay theirs

    # ------------------------------------------------------------------ reading

    def refuse(self, message: str) -> PickleRefused:
        """A refusal located at the current opcode."""
        op = self.data[self.at] if self.at < len(self.data) else None
        name = OPCODES.get(op, "?") if op is not None else "end"
        return PickleRefused(f"byte {self.at} ({name}): {message}")

    def read(self, n: int) -> bytes:
        """`n` bytes, or a refusal where the pickle (or its frame) ends first."""
        pos = self.pos
        end = pos + n
        if end > self.limit:
            self._past_limit(end)
        self.pos = end
        return self.data[pos:end]

    def _past_limit(self, end: int) -> None:
        # a read may leave a frame only where the frame ends exactly
        if self.framed and self.pos == self.limit:
            self.framed, self.limit = False, len(self.data)
            if end <= self.limit:
                return
        elif self.framed:
            raise self.refuse("reads past the end of its frame")
        raise self.refuse("the pickle is truncated")

    def readline(self) -> bytes:
        """One line without its newline (a line needs its newline: EOF is a truncation)."""
        if self.framed and self.pos == self.limit:
            self.framed, self.limit = False, len(self.data)
        end = self.data.find(b"\n", self.pos, self.limit)
        if end < 0:
            raise self.refuse("the pickle is truncated inside a line")
        line = self.data[self.pos : end]
        self.pos = end + 1
        return line

    def _uint(self, n: int) -> int:
        return int.from_bytes(self.read(n), "little")

    def _text(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise self.refuse(f"{what} is not UTF-8") from None

    # ------------------------------------------------------------------ the stack

    def push(self, value: Any) -> None:
        """Push, within the stack bound."""
        if len(self.stack) + self.depth_below >= self.limits.max_stack:
            raise self.refuse(f"more than {self.limits.max_stack} objects on the stack")
        self.stack.append(value)

    def pop(self) -> Any:
        """Pop from above the last mark (pickle never reaches below it)."""
        if not self.stack:
            raise self.refuse("pops an empty stack")
        return self.stack.pop()

    def top(self) -> Any:
        """The object on top, above the last mark."""
        if not self.stack:
            raise self.refuse("needs an object on an empty stack")
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        """Everything pushed since the last MARK, which it removes."""
        if not self.metastack:
            raise self.refuse("no MARK to pop to")
        items = self.stack
        self.stack = self.metastack.pop()
        self.depth_below -= len(self.stack)
        return items

    def tuple_of(self, items: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
        """A tuple, refused when it nests deeper than the bound."""
        value = tuple(items)
        self._nest(value)
        return value

    def _nest(self, value: tuple[Any, ...] | frozenset[Any]) -> None:
        # hashing and comparing tuples and frozensets recurse: their depth is bounded
        depth = 1 + max(
            (self.depths.get(id(v), 1) for v in value if type(v) in (tuple, frozenset)), default=0
        )
        if depth > self.limits.max_depth:
            raise self.refuse(f"tuples or frozensets nest deeper than {self.limits.max_depth}")
        if depth > 1:
            self.depths[id(value)] = depth
            self.keep.append(value)

    def key(self, value: Any) -> Any:
        """`value` as a dict key or set member, refused where Python could not hash it."""
        if not hashable(value):
            raise self.refuse(f"{describe(value)} cannot be a dict key or set member")
        return value

    # ------------------------------------------------------------------ running

    def run(self) -> Any:
        """Simulate to STOP; the symbolic result, or a refusal."""
        try:
            return self._run(_dispatch(self.policy.opcodes))
        except RecursionError:
            # a shape we did not bound: refusing is the safe answer
            raise self.refuse("the pickle nests too deeply") from None

    def _run(self, ops: dict[int, Callable[[Machine], bool]]) -> Any:
        data = self.data
        for _ in range(self.limits.max_ops):
            self.at = pos = self.pos
            if pos >= self.limit:
                self._past_limit(pos + 1)
            run = ops.get(data[pos])
            if run is None:
                name = OPCODES.get(data[pos])
                if name is None:
                    raise self.refuse(f"unknown opcode 0x{data[pos]:02x}")
                raise self.refuse(self.policy.refused_opcode(name))
            self.pos = pos + 1
            if run(self):
                return self.pop()
        raise self.refuse(f"more than {self.limits.max_ops} operations")

    # ------------------------------------------------------------------ opcodes
    # Each returns True only for STOP.

    def _op_proto(self) -> bool:
        # torch's loader only warns on other protocols; one beyond pickle's own is no pickle
        proto = self.read(1)[0]
        if proto > 5:
            raise self.refuse(f"unsupported pickle protocol {proto}")
        return False

    def _op_frame(self) -> bool:
        size = self._uint(8)
        if self.framed and self.pos < self.limit:
            raise self.refuse("a new frame begins before the current frame ends")
        if self.pos + size > len(self.data):
            raise self.refuse("the frame is longer than the pickle")
        self.framed, self.limit = True, self.pos + size
        return False

    def _op_stop(self) -> bool:
        return True

    def _op_mark(self) -> bool:
        if len(self.metastack) >= self.limits.max_marks:
            raise self.refuse(f"more than {self.limits.max_marks} open marks")
        self.metastack.append(self.stack)
        self.depth_below += len(self.stack)
        self.stack = []
        return False

    def _op_pop(self) -> bool:
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()  # CPython pops a mark when the stack above it is empty
        return False

    def _op_pop_mark(self) -> bool:
        self.pop_mark()
        return False

    def _op_dup(self) -> bool:
        self.push(self.top())
        return False

    # numbers and strings

    def _op_none(self) -> bool:
        self.push(None)
        return False

    def _op_newtrue(self) -> bool:
        self.push(True)
        return False

    def _op_newfalse(self) -> bool:
        self.push(False)
        return False

    def _op_int(self) -> bool:
        line = self.readline()
        if line == b"00":
            self.push(False)
        elif line == b"01":
            self.push(True)
        else:
            self.push(self._decimal(line, "INT"))
        return False

    def _op_long(self) -> bool:
        line = self.readline()
        self.push(self._decimal(line[:-1] if line.endswith(b"L") else line, "LONG"))
        return False

    def _decimal(self, line: bytes, what: str) -> int:
        text = line.strip()
        if len(text) > 4300 or not _DECIMAL.fullmatch(text):
            raise self.refuse(f"{what} argument is not a decimal integer")
        return int(text)

    def _op_binint(self) -> bool:
        self.push(struct.unpack("<i", self.read(4))[0])
        return False

    def _op_binint1(self) -> bool:
        self.push(self.read(1)[0])
        return False

    def _op_binint2(self) -> bool:
        self.push(self._uint(2))
        return False

    def _op_long1(self) -> bool:
        self.push(int.from_bytes(self.read(self.read(1)[0]), "little", signed=True))
        return False

    def _op_long4(self) -> bool:
        size = struct.unpack("<i", self.read(4))[0]
        if size < 0:
            raise self.refuse("LONG4 byte count is negative")
        if size > 1024:
            raise self.refuse("LONG4 integer is longer than 1024 bytes")
        self.push(int.from_bytes(self.read(size), "little", signed=True))
        return False

    def _op_float(self) -> bool:
        line = self.readline()
        try:
            self.push(float(line.decode("ascii")))
        except (UnicodeDecodeError, ValueError):
            raise self.refuse("FLOAT argument is not a number") from None
        return False

    def _op_binfloat(self) -> bool:
        self.push(struct.unpack(">d", self.read(8))[0])
        return False

    def _op_string(self) -> bool:
        line = self.readline()
        if len(line) < 2 or line[0] != line[-1] or line[:1] not in (b"'", b'"'):
            raise self.refuse("STRING argument is not quoted")
        try:
            raw = codecs.escape_decode(line[1:-1])[0]
        except ValueError:
            raise self.refuse("STRING argument is not an escaped string") from None
        self.push(self.policy.decode_short_binstring(raw))
        return False

    def _op_binstring(self) -> bool:
        size = struct.unpack("<i", self.read(4))[0]
        if size < 0:
            raise self.refuse("BINSTRING byte count is negative")
        self.push(self.policy.decode_short_binstring(self.read(size)))
        return False

    def _op_short_binstring(self) -> bool:
        self.push(self.policy.decode_short_binstring(self.read(self.read(1)[0])))
        return False

    def _op_unicode(self) -> bool:
        line = self.readline()
        try:
            self.push(line.decode("raw-unicode-escape"))
        except UnicodeDecodeError:
            raise self.refuse("UNICODE argument is not raw-unicode-escape") from None
        return False

    def _op_short_binunicode(self) -> bool:
        self.push(self._text(self.read(self.read(1)[0]), "the string"))
        return False

    def _op_binunicode(self) -> bool:
        self.push(self._text(self.read(self._uint(4)), "the string"))
        return False

    def _op_binunicode8(self) -> bool:
        self.push(self._text(self.read(self._uint(8)), "the string"))
        return False

    def _op_short_binbytes(self) -> bool:
        self.push(self.read(self.read(1)[0]))
        return False

    def _op_binbytes(self) -> bool:
        self.push(self.read(self._uint(4)))
        return False

    def _op_binbytes8(self) -> bool:
        self.push(self.read(self._uint(8)))
        return False

    def _op_bytearray8(self) -> bool:
        self.read(self._uint(8))
        self.push(Instance("builtins.bytearray", hashable=False))
        return False

    def _op_next_buffer(self) -> bool:
        self.push(self.policy.buffer())
        return False

    def _op_readonly_buffer(self) -> bool:
        self.top()
        return False

    # containers

    def _op_empty_tuple(self) -> bool:
        self.push(())
        return False

    def _op_tuple(self) -> bool:
        self.push(self.tuple_of(self.pop_mark()))
        return False

    def _op_tuple1(self) -> bool:
        self.push(self.tuple_of([self.pop()]))
        return False

    def _op_tuple2(self) -> bool:
        second = self.pop()
        self.push(self.tuple_of([self.pop(), second]))
        return False

    def _op_tuple3(self) -> bool:
        third, second = self.pop(), self.pop()
        self.push(self.tuple_of([self.pop(), second, third]))
        return False

    def _op_empty_list(self) -> bool:
        self.push([])
        return False

    def _op_list(self) -> bool:
        self.push(self.pop_mark())
        return False

    def _op_empty_dict(self) -> bool:
        self.push({})
        return False

    def _op_dict(self) -> bool:
        items = self.pop_mark()
        if len(items) % 2:
            raise self.refuse("DICT needs key-value pairs")
        self.push({self.key(items[i]): items[i + 1] for i in range(0, len(items), 2)})
        return False

    def _op_empty_set(self) -> bool:
        self.push(set())
        return False

    def _op_frozenset(self) -> bool:
        value = frozenset(self.key(v) for v in self.pop_mark())
        self._nest(value)
        self.push(value)
        return False

    def _op_append(self) -> bool:
        item = self.pop()
        target = self.top()
        self.policy.append_target(target, "APPEND")
        if type(target) is list:
            target.append(item)
        return False

    def _op_appends(self) -> bool:
        items = self.pop_mark()
        target = self.top()
        self.policy.append_target(target, "APPENDS")
        if type(target) is list:
            target.extend(items)
        return False

    def _op_setitem(self) -> bool:
        value, key = self.pop(), self.pop()
        target = self.top()
        self.policy.setitem_target(target, "SETITEM")
        self.policy.setitem(target, self.key(key), value)
        return False

    def _op_setitems(self) -> bool:
        items = self.pop_mark()
        target = self.top()
        self.policy.setitem_target(target, "SETITEMS")
        if len(items) % 2:
            raise self.refuse("SETITEMS needs key-value pairs")
        for i in range(0, len(items), 2):
            self.policy.setitem(target, self.key(items[i]), items[i + 1])
        return False

    def _op_additems(self) -> bool:
        items = self.pop_mark()
        target = self.top()
        self.policy.additems_target(target)
        keys = [self.key(v) for v in items]
        if isinstance(target, set):
            target.update(keys)
        return False

    # memo

    def _memo_put(self, index: int) -> None:
        memo = self.memo
        if len(memo) >= self.limits.max_memo and index not in memo:
            raise self.refuse(f"more than {self.limits.max_memo} memo entries")
        if not self.stack:
            raise self.refuse("needs an object on an empty stack")
        memo[index] = self.stack[-1]

    def _memo_get(self, index: int) -> None:
        if index not in self.memo:
            raise self.refuse(f"memo entry {index} was never stored")
        self.push(self.memo[index])

    def _op_put(self) -> bool:
        index = self._decimal(self.readline(), "PUT")
        if index < 0:
            raise self.refuse("negative memo index")
        self._memo_put(index)
        return False

    def _op_binput(self) -> bool:
        self._memo_put(self.read(1)[0])
        return False

    def _op_long_binput(self) -> bool:
        self._memo_put(self._uint(4))
        return False

    def _op_memoize(self) -> bool:
        self._memo_put(len(self.memo))
        return False

    def _op_get(self) -> bool:
        self._memo_get(self._decimal(self.readline(), "GET"))
        return False

    def _op_binget(self) -> bool:
        self._memo_get(self.read(1)[0])
        return False

    def _op_long_binget(self) -> bool:
        self._memo_get(self._uint(4))
        return False

    # globals, calls and objects

    def _global_line(self) -> tuple[str, str]:
        module = self._text(self.readline(), "the module name")
        name = self._text(self.readline(), "the global name")
        return module, name

    def _op_global(self) -> bool:
        module, name = self._global_line()
        self.push(self.policy.global_(module, name))
        return False

    def _op_stack_global(self) -> bool:
        name, module = self.pop(), self.pop()
        if type(module) is not str or type(name) is not str:
            raise self.refuse("STACK_GLOBAL needs two strings")
        self.push(self.policy.global_(module, name))
        return False

    def _op_inst(self) -> bool:
        module, name = self._global_line()
        args = self.tuple_of(self.pop_mark())
        cls = self.policy.global_(module, name)
        self.push(self.policy.new(cls, args, None))
        return False

    def _op_obj(self) -> bool:
        items = self.pop_mark()
        if not items:
            raise self.refuse("OBJ needs a class")
        self.push(self.policy.new(items[0], self.tuple_of(items[1:]), None))
        return False

    def _op_newobj(self) -> bool:
        args = self.pop()
        cls = self.pop()
        self.push(self.policy.new(cls, args, None))
        return False

    def _op_newobj_ex(self) -> bool:
        kwargs, args = self.pop(), self.pop()
        cls = self.pop()
        self.push(self.policy.new(cls, args, kwargs))
        return False

    def _op_reduce(self) -> bool:
        args = self.pop()
        func = self.top()
        self.stack[-1] = self.policy.call(func, args)
        return False

    def _op_build(self) -> bool:
        state = self.pop()
        self.policy.build(self.top(), state)
        return False

    def _op_persid(self) -> bool:
        pid = self.readline()
        try:
            text = pid.decode("ascii")
        except UnicodeDecodeError:
            raise self.refuse("PERSID argument is not ASCII") from None
        self.push(self.policy.persistent(text))
        return False

    def _op_binpersid(self) -> bool:
        self.push(self.policy.persistent(self.pop()))
        return False

    def _op_ext1(self) -> bool:
        return self._extension(self.read(1)[0])

    def _op_ext2(self) -> bool:
        return self._extension(self._uint(2))

    def _op_ext4(self) -> bool:
        return self._extension(struct.unpack("<i", self.read(4))[0])

    def _extension(self, code: int) -> bool:
        if code <= 0:
            raise self.refuse("extension code is not positive")
        self.push(self.policy.extension(code))
        return False


@functools.cache
def _dispatch(allowed: frozenset[str] | None) -> dict[int, Callable[[Machine], bool]]:
    """Opcode -> its simulation, for the opcodes a policy runs (None: all); made once per set."""
    named = {code: name for code, name in OPCODES.items() if allowed is None or name in allowed}
    return {code: getattr(Machine, f"_op_{name.lower()}") for code, name in named.items()}
