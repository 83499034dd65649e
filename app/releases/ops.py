"""An operator overload's signature as torch prints it (`aten::add.Tensor(Tensor self, ...)`)."""

from __future__ import annotations

from dataclasses import dataclass


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
