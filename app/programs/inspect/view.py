"""What an inspect view is: a function of a program and the request's knobs, the model it
answers with, and how a person reads that answer. Each view is one module of
`app.programs.inspect.views` holding a `VIEW`; `app.programs.inspect.registry` gathers them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel

from app.programs.inspect.common import WeightInfo
from schema.models import ExportedProgram

Result = TypeVar("Result", bound=BaseModel)


@dataclass(frozen=True)
class InspectRequest:
    """Which view of a program, and its knobs (each view reads the ones it needs)."""

    view: str
    depth: int = 1
    stages: int = 2
    by: Literal["param_bytes", "nodes"] = "param_bytes"
    supported: tuple[str, ...] = ()
    allow_single_node: bool = False


@dataclass(frozen=True)
class Subject:
    """What a view looks at: the checked document, its stored tensors (None for a bare
    document) and the node limit."""

    doc: ExportedProgram
    weights: Sequence[WeightInfo] | None
    max_nodes: int


@dataclass(frozen=True)
class View(Generic[Result]):
    """One view: its name in the API and the CLI, what it computes, and its text form."""

    name: str
    help: str
    result: type[Result]
    run: Callable[[Subject, InspectRequest], Result]
    render: Callable[[Result], str]


def megabytes(nbytes: int) -> str:
    """``12.34 MB``: sizes as the text renderings print them."""
    return f"{nbytes / 1e6:.2f} MB"
