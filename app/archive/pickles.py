"""Reading what a pickle would import, without running it (pickletools disassembles opcodes).

Sample inputs are pickles that torch writes with `torch.save`; we never load them, but we refuse
to carry one that would import anything beyond what torch's weights-only loader rebuilds tensors
from: such a member is a payload waiting for the next trusting loader.
"""

from __future__ import annotations

import io
import pickletools
import re

from app.archive.zipread import ZipReader
from app.failure import Failure
from app.settings import Settings

_STRING_OPS = {
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "SHORT_BINSTRING",
    "BINSTRING",
    "STRING",
}
_MEMO_PUT = {"BINPUT", "LONG_BINPUT", "PUT"}
_MEMO_GET = {"BINGET", "LONG_BINGET", "GET"}
#: what torch.save writes for tensors and containers (the weights-only loader's own list, in part)
_ALLOWED = {
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "collections.OrderedDict",
    "torch.device",
    "torch.Size",
    "builtins.set",
    "builtins.frozenset",
    "builtins.slice",
    "builtins.complex",
}
_TORCH_TYPES = re.compile(r"torch\.(\w+Storage|float\d*|bfloat16|int\d*|uint\d*|bool|complex\d+)")
_MAX_PICKLE_BYTES = 64 * 1024 * 1024


class PickleRefused(Failure):
    """A pickle that would import something a weights-only loader does not allow."""


def pickle_globals(data: bytes) -> list[str]:
    """Every `module.name` the pickle would import; `?` where it cannot be told statically."""
    found: list[str] = []
    strings: list[str] = []
    memo: dict[int, str] = {}
    memoized = 0  # MEMOIZE numbers every object it stores, strings or not
    last: str | None = None
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            name = op.name
            if name in _STRING_OPS:
                last = arg.decode("latin-1") if isinstance(arg, bytes) else str(arg)
                strings.append(last)
            elif name == "MEMOIZE":
                if last is not None:
                    memo[memoized] = last
                memoized += 1
            elif name in _MEMO_PUT and last is not None:
                memo[int(str(arg))] = last
            elif name in _MEMO_GET:
                last = memo.get(int(str(arg)))
                strings.append(last if last is not None else "?")
            elif name in ("GLOBAL", "INST"):
                found.append(str(arg).replace(" ", "."))
            elif name == "STACK_GLOBAL":
                found.append(".".join(strings[-2:]) if len(strings) >= 2 else "?")
            elif name.startswith("EXT"):
                found.append("?extension-registry")
            else:
                last = None
    except (ValueError, EOFError) as exc:
        raise PickleRefused("unsafe-pickle", f"the pickle cannot be read: {exc}") from None
    return found


def disallowed(globals_: list[str]) -> list[str]:
    """The imports outside what a weights-only tensor pickle needs."""
    return sorted({g for g in globals_ if g not in _ALLOWED and not _TORCH_TYPES.fullmatch(g)})


def check_torch_save(data: bytes, settings: Settings) -> list[str]:
    """Disallowed imports of a `torch.save` file (a zip holding data.pkl) or a bare pickle."""
    if data.startswith(b"PK"):
        with ZipReader(data, settings) as inner:
            pickles = [n for n in inner.names if n.endswith(".pkl")]
            if not pickles:
                return ["?no-data.pkl"]
            found: list[str] = []
            for name in pickles:
                found += disallowed(pickle_globals(inner.read_member(name, _MAX_PICKLE_BYTES)))
            return found
    return disallowed(pickle_globals(data))
