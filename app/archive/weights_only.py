"""torch's `weights_only` unpickler as a pickle-machine policy: its rules, generated from the pinned
torch into its release's rules file (`app.releases`: the opcodes it runs, the globals it
resolves, the Python 2 name mappings and blocked modules it applies first, what REDUCE, NEWOBJ,
BUILD, APPEND and SETITEM may act on, the persistent ids of storages).

Where torch would call a function, we model the function: the rebuild functions `torch.save`
writes (tensors, parameters, subclasses with Python state, sizes, devices, dtypes, layouts, bytes,
sets, complex numbers, OrderedDict, Counter) are checked argument by argument, down to the storage
bounds `Tensor.set_` checks. What torch allows but we do not model (sparse and nested
tensors, legacy tensor constructors, typed storages built by REDUCE, BUILD on plain tensors) is
refused as "not proven": stricter than torch, never looser.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.archive.pickle_machine import Machine
from app.archive.pickle_symbols import Global, Instance, PickleRefused, Policy, describe
from app.releases import installed

#: the opcodes torch's weights_only unpickler runs (everything else is "Unsupported operand")
TORCH_OPCODES = frozenset(
    "GLOBAL NEWOBJ REDUCE BUILD APPEND APPENDS SETITEM SETITEMS MARK TUPLE TUPLE1 TUPLE2 TUPLE3 "
    "NONE NEWFALSE NEWTRUE EMPTY_TUPLE EMPTY_LIST EMPTY_DICT EMPTY_SET BININT BININT1 BININT2 "
    "BINFLOAT BINUNICODE SHORT_BINSTRING BINPERSID BINGET LONG_BINGET BINPUT LONG_BINPUT LONG1 "
    "PROTO STOP".split()
)

#: storage locations the pinned CPU torch restores (others need a device it does not have)
_LOCATIONS = frozenset({"cpu", "meta"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEVICE = re.compile(r"(cpu|meta)(:0)?")
_QUANTIZED = frozenset(
    {"torch.quint8", "torch.qint8", "torch.qint32", "torch.quint4x2", "torch.quint2x4"}
)
_PER_CHANNEL = frozenset({"torch.per_channel_affine", "torch.per_channel_affine_float_qparams"})
_ENCODINGS = frozenset({"latin1", "latin-1", "utf-8", "utf8", "ascii"})

_TENSOR = "torch.Tensor"
_PARAMETER = "torch.nn.parameter.Parameter"
_ORDERED_DICT = "collections.OrderedDict"
_COUNTER = "collections.Counter"
_STORAGE = "torch.storage.TypedStorage"
_UNTYPED = "torch.storage.UntypedStorage"


@dataclass(frozen=True)
class Rules:
    """torch's weights_only rules as generated data (a release's rules file, `app.releases`)."""

    allowed: dict[str, dict[str, Any]]
    user_allowed: dict[str, dict[str, Any]]
    blocked_modules: frozenset[str]
    import_mapping: dict[str, str]
    name_mapping: dict[tuple[str, str], tuple[str, str]]
    dtypes: dict[str, dict[str, Any]]
    layouts: frozenset[str]
    tensor_attributes: frozenset[str]

    def entry(self, path: str) -> dict[str, Any] | None:
        """What torch resolves `path` to, or None when it is not allowed."""
        return self.allowed.get(path) or self.user_allowed.get(path)


@functools.cache
def rules() -> Rules:
    """The rules of the pinned torch, read once from its release's rules file."""
    raw = installed().weights_only()
    if raw is None:
        raise RuntimeError(f"torch {installed().release}'s rules hold no weights_only globals")
    return Rules(
        allowed=raw["allowed"],
        user_allowed=raw["user_allowed"],
        blocked_modules=frozenset(raw["blocked_modules"]),
        import_mapping=raw["import_mapping"],
        name_mapping={(a, b): (c, d) for a, b, c, d in raw["name_mapping"]},
        dtypes=raw["dtypes"],
        layouts=frozenset(raw["layouts"]),
        tensor_attributes=frozenset(raw["tensor_attributes"]),
    )


def _tensor(type_: str, dtype: str, numel: int = 0) -> Instance:
    return Instance(type_, dtype, numel=numel)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Instance) and value.type in (_TENSOR, _PARAMETER)


@dataclass
class WeightsOnly(Policy):
    """torch's weights_only unpickler as `torch.load` runs it on a zip's data.pkl."""

    rules: Rules
    #: storage key -> byte size of its `data/<key>` record
    records: dict[str, int]
    storages: dict[str, Instance] = field(default_factory=dict)
    machine: Machine | None = None
    opcodes: frozenset[str] | None = TORCH_OPCODES

    def refuse(self, message: str) -> PickleRefused:
        """A refusal at the machine's current opcode."""
        assert self.machine is not None
        return self.machine.refuse(message)

    def refused_opcode(self, name: str) -> str:
        """Only the opcodes torch's loader implements."""
        return f"torch's weights_only loader does not run {name}"

    def decode_short_binstring(self, raw: bytes) -> Any:
        """torch.load unpickles with encoding='utf-8' (strict)."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.refuse("SHORT_BINSTRING is not UTF-8") from None

    def global_(self, module: str, name: str) -> Any:
        """torch's mapping of Python 2 names, its blocked modules, then its allowlist."""
        mapped = self.rules.name_mapping.get((module, name))
        if mapped is not None:
            module, name = mapped
        else:
            module = self.rules.import_mapping.get(module, module)
        path = f"{module}.{name}"
        if module in self.rules.blocked_modules:
            raise self.refuse(f"{path}: module {module} is blocked by torch")
        if self.rules.entry(path) is None:
            raise self.refuse(f"{path} is not a global torch's weights_only loader allows")
        return Global(module, name)

    # -- calls ----------------------------------------------------------------------------

    def call(self, func: Any, args: Any) -> Any:
        """REDUCE: only allowed globals, and only what we can prove they do."""
        if not isinstance(func, Global):
            raise self.refuse(f"REDUCE calls {describe(func)}, which torch does not allow")
        entry = self.rules.entry(func.path)
        assert entry is not None  # only the allowlist makes Globals here
        if entry["kind"] not in ("class", "function", "tensor-type"):
            raise self.refuse(f"{func.path} is not callable")
        if type(args) not in (tuple, list):
            raise self.refuse(f"REDUCE arguments for {func.path} are {describe(args)}")
        model = _CALLS.get(func.path)
        if model is None:
            raise self.refuse(f"{func.path} is allowed by torch but not proven here")
        return model(self, tuple(args))

    def new(self, cls: Any, args: Any, kwargs: Any) -> Any:
        """NEWOBJ: `nn.Parameter(*args)`, or `cls.__new__(cls, *args)` for allowed classes."""
        if not isinstance(cls, Global) or self.rules.entry(cls.path) is None:
            raise self.refuse(f"NEWOBJ on {describe(cls)}, which torch does not allow")
        if type(args) not in (tuple, list):
            raise self.refuse(f"NEWOBJ arguments are {describe(args)}")
        if cls.path == _PARAMETER:
            return _parameter(self, tuple(args))
        if cls.path in (_ORDERED_DICT, _COUNTER):
            return Instance(cls.path, items={}, hashable=False)  # dict.__new__ ignores args
        entry = self.rules.user_allowed.get(cls.path)
        if entry and "state_fields" in entry and entry["plain_new"] and not args:
            return Instance(cls.path)  # object.__new__: an empty dataclass BUILD fills
        raise self.refuse(f"NEWOBJ on {cls.path} is allowed by torch but not proven here")

    def build(self, inst: Any, state: Any) -> None:
        """BUILD: torch allows it on Tensor, Parameter, OrderedDict and allowed classes."""
        kind = inst.type if isinstance(inst, Instance) else None
        if kind == _ORDERED_DICT:
            # torch updates an OrderedDict's __dict__ with the state itself
            if type(state) is not dict:
                raise self.refuse(f"BUILD state for an OrderedDict is {describe(state)}")
            self._attributes(state, kind)
            return
        if kind == _COUNTER:
            # no __setstate__: __dict__ takes the state, or a (dict, slots) pair
            self._attributes(state, kind)
            return
        entry = self.rules.entry(kind) if kind else None
        if entry is None:
            raise self.refuse(f"BUILD on {describe(inst)}, which torch does not allow")
        if "state_fields" in entry:
            if type(state) not in (list, tuple):
                raise self.refuse(f"BUILD state for {kind} is {describe(state)}, not its fields")
            return
        raise self.refuse(f"BUILD on a {kind} object is allowed by torch but not proven here")

    def _attributes(
        self, state: Any, owner: str, *, reserved: frozenset[str] = frozenset()
    ) -> None:
        """A `(dict, slots)` or dict state whose keys become attributes of an object."""
        parts = state if type(state) is tuple and len(state) == 2 else (state,)
        for part in parts:
            if part is None or part == {}:
                continue
            if type(part) is not dict:
                raise self.refuse(f"state for {owner} is {describe(part)}, not a dict")
            for key in part:
                if type(key) is not str:
                    raise self.refuse(f"state for {owner} names an attribute by {describe(key)}")
                if not _IDENTIFIER.fullmatch(key) or key.startswith("__") or key in reserved:
                    raise self.refuse(f"state for {owner} sets attribute {key!r:.60}")

    def persistent(self, pid: Any) -> Any:
        """BINPERSID: ('storage', storage_type, key, location, numel) naming a data/ record."""
        if type(pid) is not tuple:
            raise self.refuse(f"persistent id is {describe(pid)}, not a tuple")
        if not pid or _ascii(pid[0]) != "storage":
            raise self.refuse("persistent id is not a storage")
        if len(pid) != 5:
            raise self.refuse(f"storage persistent id has {len(pid)} fields, not 5")
        _, storage_type, key, location, numel = pid
        dtype = self._storage_dtype(storage_type)
        if type(key) is not str:
            raise self.refuse(f"storage key is {describe(key)}")
        place = _ascii(location)
        if type(place) is not str:
            raise self.refuse(f"storage location is {describe(location)}")
        if place not in _LOCATIONS:
            raise self.refuse(f"storage location {place!r:.40} cannot be restored here")
        if type(numel) is not int or numel < 0:
            raise self.refuse("storage element count is not a non-negative int")
        if key in self.storages:
            return self.storages[key]  # torch reuses a loaded storage by key
        itemsize = self.rules.dtypes[dtype]["itemsize"]
        if itemsize is None:
            raise self.refuse(f"torch cannot size a storage of {dtype}")
        size = self.records.get(key)
        if size is None:
            raise self.refuse(f"storage record data/{key:.40} is missing")
        if size != numel * itemsize:
            raise self.refuse(
                f"storage record data/{key:.40} holds {size} bytes, not {numel * itemsize}"
            )
        storage = Instance(_STORAGE, dtype, numel=numel)
        if numel:
            self.storages[key] = storage
        return storage

    def _storage_dtype(self, storage_type: Any) -> str:
        if isinstance(storage_type, Global):
            if storage_type.path == _UNTYPED:
                return "torch.uint8"
            entry = self.rules.entry(storage_type.path)
            if entry and entry["kind"] in ("storage-type", "tensor-type"):
                return str(entry["dtype"])
        raise self.refuse(f"storage type is {describe(storage_type)}")

    def append_target(self, target: Any, op: str) -> None:
        """torch appends only to lists."""
        if type(target) is not list:
            raise self.refuse(f"{op} to {describe(target)}; torch appends only to lists")

    def setitem_target(self, target: Any, op: str) -> None:
        """torch sets items only on dict, OrderedDict and Counter."""
        if type(target) is dict:
            return
        if isinstance(target, Instance) and target.type in (_ORDERED_DICT, _COUNTER):
            return
        raise self.refuse(f"{op} on {describe(target)}; torch sets items only on dicts")


def _ascii(value: Any) -> Any:
    if type(value) is bytes:
        try:
            return value.decode("ascii")
        except UnicodeDecodeError:
            return None
    return value


# -- what allowed functions make --------------------------------------------------------------

Call = Callable[[WeightsOnly, tuple[Any, ...]], Any]


def _arity(policy: WeightsOnly, name: str, args: tuple[Any, ...], *counts: int) -> None:
    if len(args) not in counts:
        raise policy.refuse(f"{name} takes {' or '.join(map(str, counts))} arguments")


def _ints(policy: WeightsOnly, value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, Instance) and value.type == "torch.Size":
        value = value.detail
    if type(value) not in (tuple, list) or any(type(v) is not int or v < 0 for v in value):
        raise policy.refuse(f"{what} is not a sequence of non-negative ints")
    return tuple(value)


def _dtype(policy: WeightsOnly, value: Any) -> str:
    if isinstance(value, Global):
        entry = policy.rules.entry(value.path)
        if entry and entry["kind"] == "dtype":
            return value.path
    raise policy.refuse(f"dtype is {describe(value)}")


def _requires_grad(policy: WeightsOnly, value: Any, dtype: str) -> None:
    if type(value) is not bool:
        raise policy.refuse("requires_grad is not a bool")
    if value and not policy.rules.dtypes[dtype]["grad"]:
        raise policy.refuse(f"a {dtype} tensor cannot require grad")


def _hooks(policy: WeightsOnly, value: Any) -> None:
    # torch.save writes an empty OrderedDict ("Don't serialize hooks")
    if not (isinstance(value, Instance) and value.type == _ORDERED_DICT and not value.items):
        raise policy.refuse("backward hooks are not an empty OrderedDict")


def _metadata(policy: WeightsOnly, value: Any) -> None:
    if not value:
        return
    if type(value) is not dict or any(
        type(k) is not str or type(v) is not bool for k, v in value.items()
    ):
        raise policy.refuse("tensor metadata is not a dict of flags")


def _storage_view(
    policy: WeightsOnly, storage: Any, offset: Any, size: Any, stride: Any, itemsize: int
) -> None:
    """What `Tensor.set_(storage, offset, size, stride)` checks: the view fits the storage."""
    if not (isinstance(storage, Instance) and storage.type == _STORAGE):
        raise policy.refuse(f"storage is {describe(storage)}")
    if type(offset) is not int or offset < 0:
        raise policy.refuse("storage offset is not a non-negative int")
    dims, steps = _ints(policy, size, "size"), _ints(policy, stride, "stride")
    if len(dims) != len(steps):
        raise policy.refuse("size and stride differ in length")
    if 0 in dims:
        return
    last = offset + sum((d - 1) * s for d, s in zip(dims, steps, strict=True))
    have = storage.numel * policy.rules.dtypes[storage.detail]["itemsize"]
    if (last + 1) * itemsize > have:
        raise policy.refuse("the tensor reaches past the end of its storage")


def _numel(size: Any) -> int:
    dims = size.detail if isinstance(size, Instance) else size
    return math.prod(dims)


def _rebuild_tensor(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_tensor", args, 4)
    storage, offset, size, stride = args
    _storage_view(policy, storage, offset, size, stride, _itemsize(policy, storage))
    return _tensor(_TENSOR, storage.detail, _numel(args[2]))


def _itemsize(policy: WeightsOnly, storage: Any) -> int:
    if not (isinstance(storage, Instance) and storage.type == _STORAGE):
        raise policy.refuse(f"storage is {describe(storage)}")
    return int(policy.rules.dtypes[storage.detail]["itemsize"])


def _rebuild_tensor_v2(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_tensor_v2", args, 6, 7)
    storage, offset, size, stride, requires_grad, hooks = args[:6]
    _storage_view(policy, storage, offset, size, stride, _itemsize(policy, storage))
    _requires_grad(policy, requires_grad, storage.detail)
    _metadata(policy, args[6] if len(args) == 7 else None)
    _hooks(policy, hooks)
    return _tensor(_TENSOR, storage.detail, _numel(size))


def _rebuild_tensor_v3(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_tensor_v3", args, 7, 8)
    storage, offset, size, stride, requires_grad, hooks, dtype_ = args[:7]
    dtype = _dtype(policy, dtype_)
    itemsize = policy.rules.dtypes[dtype]["itemsize"]
    if itemsize is None:
        raise policy.refuse(f"torch cannot size a tensor of {dtype}")
    _itemsize(policy, storage)
    _storage_view(policy, storage, offset, size, stride, itemsize)
    _requires_grad(policy, requires_grad, dtype)
    _metadata(policy, args[7] if len(args) == 8 else None)
    _hooks(policy, hooks)
    return _tensor(_TENSOR, dtype, _numel(size))


def _rebuild_qtensor(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_qtensor", args, 7)
    storage, offset, size, stride, params, requires_grad, hooks = args
    dtype = storage.detail if isinstance(storage, Instance) else None
    if dtype not in _QUANTIZED:
        raise policy.refuse(f"quantized tensor storage is {describe(storage)}")
    _storage_view(policy, storage, offset, size, stride, _itemsize(policy, storage))
    dims = _ints(policy, size, "size")
    is_scheme = type(params) is tuple and params and isinstance(params[0], Global)
    scheme = params[0].path if is_scheme else None
    if scheme == "torch.per_tensor_affine" and len(params) == 3:
        if type(params[1]) is not float or type(params[2]) is not int:
            raise policy.refuse("per-tensor quantizer takes a float scale and an int zero point")
    elif scheme in _PER_CHANNEL and len(params) == 4:
        axis = params[3]
        if type(axis) is not int or not 0 <= axis < len(dims):
            raise policy.refuse("per-channel quantizer axis is out of range")
        for values in params[1:3]:
            if type(values) is list:
                count = len(values)
            elif _is_tensor(values):
                count = values.numel
            else:
                raise policy.refuse("per-channel scales are not a list or a tensor")
            if count != dims[axis]:
                raise policy.refuse("per-channel scales do not match the size along the axis")
    else:
        raise policy.refuse("quantizer parameters are not ones torch rebuilds")
    if requires_grad is not False:
        raise policy.refuse("a quantized tensor cannot require grad")
    _hooks(policy, hooks)
    return _tensor(_TENSOR, dtype, _numel(size))


def _rebuild_meta(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_meta_tensor_no_storage", args, 4)
    dtype = _dtype(policy, args[0])
    if len(_ints(policy, args[1], "size")) != len(_ints(policy, args[2], "stride")):
        raise policy.refuse("size and stride differ in length")
    _requires_grad(policy, args[3], dtype)
    return _tensor(_TENSOR, dtype, _numel(args[1]))


def _parameter(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "Parameter", args, 0, 1, 2)
    if not args:
        return _tensor(_PARAMETER, "torch.float32")
    data = args[0]
    if not _is_tensor(data):
        raise policy.refuse(f"Parameter data is {describe(data)}")
    _requires_grad(policy, args[1] if len(args) == 2 else True, data.detail)
    return _tensor(_PARAMETER, data.detail, data.numel)


def _rebuild_parameter(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_parameter", args, 3)
    _hooks(policy, args[2])
    return _parameter(policy, args[:2])


def _rebuild_parameter_with_state(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_parameter_with_state", args, 4)
    _hooks(policy, args[2])
    param = _parameter(policy, args[:2])
    policy._attributes(args[3], "a Parameter", reserved=policy.rules.tensor_attributes)
    return param


def _rebuild_from_type_v2(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    """func(*args) viewed as `new_type` (a tensor class), then its Python attributes set."""
    _arity(policy, "_rebuild_from_type_v2", args, 4)
    func, new_type, inner, state = args
    if not isinstance(new_type, Global) or new_type.path not in (_TENSOR, _PARAMETER):
        raise policy.refuse(f"_rebuild_from_type_v2 makes {describe(new_type)}")
    made = policy.call(func, inner)
    if not _is_tensor(made):
        raise policy.refuse(f"_rebuild_from_type_v2 rebuilds {describe(made)}, not a tensor")
    policy._attributes(state, new_type.path, reserved=policy.rules.tensor_attributes)
    return _tensor(new_type.path, made.detail, made.numel)


def _rebuild_from_cpu(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_rebuild_device_tensor_from_cpu_tensor", args, 4)
    data, dtype_, device, requires_grad = args
    if not _is_tensor(data):
        raise policy.refuse(f"tensor data is {describe(data)}")
    dtype = _dtype(policy, dtype_)
    if type(device) is not str or not _DEVICE.fullmatch(device):
        raise policy.refuse(f"device {describe(device)} cannot be restored")
    _requires_grad(policy, requires_grad, dtype)
    return _tensor(_TENSOR, dtype, data.numel)


def _mapping(kind: str) -> Call:
    def make(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
        _arity(policy, kind, args, 0, 1)
        items: dict[Any, Any] = {}
        if args:
            source = args[0]
            if isinstance(source, Instance) and source.items is not None:
                source = source.items
            if type(source) is dict:
                items.update(source)
            elif kind == _ORDERED_DICT and type(source) in (list, tuple):
                for pair in source:
                    if type(pair) not in (list, tuple) or len(pair) != 2:
                        raise policy.refuse("OrderedDict items are not pairs")
                    assert policy.machine is not None
                    items[policy.machine.key(pair[0])] = pair[1]
            else:
                raise policy.refuse(f"{kind} of {describe(source)}")
        return Instance(kind, items=items, hashable=False)

    return make


def _size(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "torch.Size", args, 0, 1)
    dims = args[0] if args else ()
    if type(dims) not in (tuple, list) or any(type(d) is not int for d in dims):
        raise policy.refuse("torch.Size takes a sequence of ints")
    return Instance("torch.Size", tuple(dims))


def _device(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "torch.device", args, 1, 2)
    kind = args[0]
    if type(kind) is not str or not _DEVICE.fullmatch(kind):
        raise policy.refuse(f"device {describe(kind)} is not one this torch has")
    if len(args) == 2 and (type(args[1]) is not int or args[1] != 0 or ":" in kind):
        raise policy.refuse("device index is not 0")
    return Instance("torch.device", kind)


def _layout(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_get_layout", args, 1)
    if type(args[0]) is not str or args[0] not in policy.rules.layouts:
        raise policy.refuse(f"{describe(args[0])} is not a layout")
    return Instance("torch.layout", args[0])


def _encode(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "_codecs.encode", args, 1, 2)
    text, encoding = args[0], args[1] if len(args) == 2 else "utf-8"
    if type(text) is not str or type(encoding) is not str or encoding not in _ENCODINGS:
        raise policy.refuse("_codecs.encode is proven only on a str and a standard encoding")
    try:
        return text.encode(encoding)
    except UnicodeEncodeError:
        raise policy.refuse(f"the string cannot be encoded as {encoding}") from None


def _bytearray(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "bytearray", args, 0, 1)
    if args and type(args[0]) is not bytes:
        raise policy.refuse(f"bytearray of {describe(args[0])}")
    return Instance("builtins.bytearray", hashable=False)


def _set(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "set", args, 0, 1)
    if not args:
        return set()
    if type(args[0]) not in (list, tuple, set):
        raise policy.refuse(f"set of {describe(args[0])}")
    assert policy.machine is not None
    return {policy.machine.key(v) for v in args[0]}


def _complex(policy: WeightsOnly, args: tuple[Any, ...]) -> Any:
    _arity(policy, "complex", args, 0, 1, 2)
    if any(type(v) not in (int, float, bool) for v in args):
        raise policy.refuse("complex takes real numbers")
    try:
        return complex(*args)
    except OverflowError:
        raise policy.refuse("the number is too large for a complex") from None


_CALLS: dict[str, Call] = {
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
    "torch._utils._rebuild_meta_tensor_no_storage": _rebuild_meta,
    "torch._utils._rebuild_qtensor": _rebuild_qtensor,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": _rebuild_from_cpu,
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    _PARAMETER: _parameter,
    _ORDERED_DICT: _mapping(_ORDERED_DICT),
    _COUNTER: _mapping(_COUNTER),
    "torch.Size": _size,
    "torch.device": _device,
    "torch.serialization._get_layout": _layout,
    "_codecs.encode": _encode,
    "builtins.bytearray": _bytearray,
    "builtins.set": _set,
    "builtins.complex": _complex,
}
