"""The operator registry of the pinned torch, without torch: a view of `app.releases.installed()`.

The data lives in one place, the installed release's rules file (`app/releases/data/`, written
by `make releases-rules` from that release; a test fails when it is stale). It holds what a
fresh `torch.export.load` resolves: every operator schema, the higher-order operators and the
Python callables torch writes as node targets. Checks of a document against the release that
wrote it take `app.releases.judging(...)` rules instead, which answer the same questions.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.releases import OpArgument, OpReturn, OpSchema, installed

__all__ = [
    "TORCH_NAMESPACE_MODULES",
    "OpArgument",
    "OpReturn",
    "OpSchema",
    "attribute_names",
    "builtin_namespaces",
    "has_operator",
    "higher_order_names",
    "is_builtin_namespace",
    "is_higher_order",
    "lookup",
    "overloads",
    "python_targets",
    "schemas",
    "torch_version",
]

#: Operator namespaces torch defines in Python modules that `import torch` leaves unloaded
#: (pt2e quantization's quantize/dequantize ops, among others): a worker imports the module,
#: which is part of torch and named here, never by a document, when a program uses one.
TORCH_NAMESPACE_MODULES: dict[str, str] = {
    "quantized_decomposed": "torch.ao.quantization.fx._decomposed",
    "ao": "torch._functorch._activation_offloading.offload_ops",
}


def torch_version() -> str:
    """The torch release the registry was written from (`2.13.0+cpu`)."""
    return installed().torch


def lookup(namespace: str, name: str, overload: str) -> OpSchema | None:
    """The schema of `torch.ops.<namespace>.<name>.<overload>`, or None if torch has none."""
    return installed().lookup(namespace, name, overload)


def overloads(namespace: str, name: str) -> tuple[str, ...]:
    """The overload names of an operator (empty if torch has no such operator)."""
    return installed().overloads(namespace, name)


def has_operator(namespace: str, name: str) -> bool:
    """Whether torch registers an operator of that name (in any overload)."""
    return installed().has_operator(namespace, name)


def is_builtin_namespace(namespace: str) -> bool:
    """Whether a fresh torch process that loads programs has registered this namespace itself."""
    return installed().is_builtin_namespace(namespace)


def builtin_namespaces() -> frozenset[str]:
    """Every operator namespace the pinned torch registers by itself."""
    return installed().builtin_namespaces()


def is_higher_order(name: str) -> bool:
    """Whether `torch.ops.higher_order.<name>` is a registered higher-order operator."""
    return installed().is_higher_order(name)


def higher_order_names() -> frozenset[str]:
    """Every registered higher-order operator."""
    return installed().higher_order_names()


def python_targets() -> frozenset[str]:
    """The Python callables torch writes as node targets (`_operator.add`, `torch.sym_max`)."""
    return installed().python_targets()


def attribute_names(level: str) -> frozenset[str]:
    """Names that reach an attribute, not an operator, on `torch.ops` ("ops"), a namespace
    ("namespace"), an operator packet ("packet") or `torch.ops.higher_order`."""
    return installed().attribute_names(level)


def schemas() -> Iterator[OpSchema]:
    """Every overload of the registry, by namespace, operator and overload name."""
    return installed().schemas()
