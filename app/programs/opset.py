"""The operator registry of the pinned torch, without torch.

`opset.json.gz` beside this module is written by `app.bridge.opset_dump` (`make opset`) from the
installed torch; a test fails when it is stale. It holds what a fresh `torch.export.load`
resolves: every operator schema, the higher-order operators and the Python callables torch
writes as node targets. Loaded once, on first use.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson

#: The layout of the data file this module reads (`app.bridge.opset_dump.FORMAT`).
FORMAT = 1
#: Operator namespaces torch defines in Python modules that `import torch` leaves unloaded
#: (pt2e quantization's quantize/dequantize ops, among others): a worker imports the module,
#: which is part of torch and named here, never by a document, when a program uses one.
TORCH_NAMESPACE_MODULES: dict[str, str] = {
    "quantized_decomposed": "torch.ao.quantization.fx._decomposed",
    "ao": "torch._functorch._activation_offloading.offload_ops",
}


@dataclass(frozen=True)
class OpArgument:
    """One argument of an operator schema, as torch prints it."""

    name: str
    #: the type as torch writes it in schemas, without alias annotations (`SymInt[2]`, `Tensor?`)
    type: str
    #: the default as torch prints it (`None`, `[1, 1]`, `"mean"`), or None when required
    default: str | None
    kwarg_only: bool
    #: the alias annotation (`a`, `a!`, `a -> *`), or None
    alias: str | None

    @property
    def mutates(self) -> bool:
        """Whether the operator writes to this argument."""
        return self.alias is not None and self.alias.endswith("!")


@dataclass(frozen=True)
class OpReturn:
    """One return of an operator schema (named only in a few schemas)."""

    name: str
    type: str
    alias: str | None


@dataclass(frozen=True)
class OpSchema:
    """One operator overload: `<namespace>::<name>.<overload>` and its signature."""

    namespace: str
    name: str
    #: "default" for the overload torch prints without a name
    overload: str
    arguments: tuple[OpArgument, ...]
    returns: tuple[OpReturn, ...]
    #: the schema takes any further arguments (`...`), so names and arity are not checked
    vararg: bool
    varret: bool
    #: torch registers it, but `torch.ops.<ns>.<name>` resolves to an attribute of the namespace
    #: object instead (`prim::name`), so no program can name it
    unreachable: bool
    #: a Python number may stand for a Tensor argument (torch wraps it when calling the operator)
    numbers_as_tensors: bool

    @property
    def target(self) -> str:
        """The node target torch writes for this overload."""
        return f"torch.ops.{self.namespace}.{self.name}.{self.overload}"


@dataclass(frozen=True)
class _Registry:
    torch: str
    #: namespace -> operator name -> overload name -> raw entry (parsed on lookup)
    operators: dict[str, dict[str, dict[str, Any]]]
    higher_order: frozenset[str]
    python_targets: frozenset[str]
    #: level ("ops", "namespace", "packet", "higher_order") -> names of the object's attributes
    attributes: dict[str, frozenset[str]]


@functools.cache
def _registry() -> _Registry:
    raw = orjson.loads(
        gzip.decompress(resources.files(__package__).joinpath("opset.json.gz").read_bytes())
    )
    if raw["format"] != FORMAT:
        raise RuntimeError(f"opset.json.gz has format {raw['format']}, this reader {FORMAT}")
    operators: dict[str, dict[str, dict[str, Any]]] = {}
    for qualified, overloads in raw["operators"].items():
        namespace, _, name = qualified.partition("::")
        operators.setdefault(namespace, {})[name] = overloads
    return _Registry(
        raw["torch"],
        operators,
        frozenset(raw["higher_order"]),
        frozenset(raw["python_targets"]),
        {level: frozenset(names) for level, names in raw["attributes"].items()},
    )


def torch_version() -> str:
    """The torch release the registry was written from."""
    return _registry().torch


@functools.lru_cache(maxsize=4096)
def lookup(namespace: str, name: str, overload: str) -> OpSchema | None:
    """The schema of `torch.ops.<namespace>.<name>.<overload>`, or None if torch has none."""
    entry = _registry().operators.get(namespace, {}).get(name, {}).get(overload)
    if entry is None:
        return None
    return OpSchema(
        namespace=namespace,
        name=name,
        overload=overload,
        arguments=tuple(
            OpArgument(
                name=a["name"],
                type=a["type"],
                default=a.get("default"),
                kwarg_only=a.get("kwarg_only", False),
                alias=a.get("alias"),
            )
            for a in entry["arguments"]
        ),
        returns=tuple(
            OpReturn(name=r.get("name", ""), type=r["type"], alias=r.get("alias"))
            for r in entry["returns"]
        ),
        vararg=entry.get("vararg", False),
        varret=entry.get("varret", False),
        unreachable=entry.get("unreachable", False),
        numbers_as_tensors=entry.get("numbers_as_tensors", False),
    )


def overloads(namespace: str, name: str) -> tuple[str, ...]:
    """The overload names of an operator (empty if torch has no such operator)."""
    return tuple(sorted(_registry().operators.get(namespace, {}).get(name, {})))


def has_operator(namespace: str, name: str) -> bool:
    """Whether torch registers an operator of that name (in any overload)."""
    return name in _registry().operators.get(namespace, {})


def is_builtin_namespace(namespace: str) -> bool:
    """Whether a fresh torch process that loads programs has registered this namespace itself."""
    return namespace in _registry().operators


def builtin_namespaces() -> frozenset[str]:
    """Every operator namespace the pinned torch registers by itself."""
    return frozenset(_registry().operators)


def is_higher_order(name: str) -> bool:
    """Whether `torch.ops.higher_order.<name>` is a registered higher-order operator."""
    return name in _registry().higher_order


def higher_order_names() -> frozenset[str]:
    """Every registered higher-order operator."""
    return _registry().higher_order


def python_targets() -> frozenset[str]:
    """The Python callables torch writes as node targets (`_operator.add`, `torch.sym_max`)."""
    return _registry().python_targets


def attribute_names(level: str) -> frozenset[str]:
    """Names that reach an attribute, not an operator, on `torch.ops` ("ops"), a namespace
    ("namespace"), an operator packet ("packet") or `torch.ops.higher_order`."""
    return _registry().attributes[level]


def schemas() -> Iterator[OpSchema]:
    """Every overload of the registry, by namespace, operator and overload name."""
    registry = _registry()
    for namespace in sorted(registry.operators):
        for name in sorted(registry.operators[namespace]):
            for overload in sorted(registry.operators[namespace][name]):
                op = lookup(namespace, name, overload)
                if op is not None:
                    yield op
