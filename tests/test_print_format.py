"""torch's print operator: the formats torch writes for a user's print are accepted, and one
that reads attributes or items of its arguments (which walks to any object of the process that
runs the program) is refused, as Python's own format grammar reads it."""

from __future__ import annotations

import _string
import os
import string

import pytest
import torch
from torch._higher_order_ops.print import print as torch_print

import schema
from app.programs.screen import PRINT_TARGET, screen
from app.settings import Settings
from tests.zoo import torch_json

LIMITS = Settings().limits

ACCEPTED = ["value {} {k}", "{0:>8} {1!r}", "{:{w}.{p}f}", "{{0.__class__}} {}", "plain"]
REFUSED = [
    "{0.__class__}",
    "{0[0]}",
    "{k.real}",
    "{:{0.__class__}}",
    "{0.__reduce_ex__.__func__.__globals__[torch].os.environ}",
    "{0",
]


class _Printing(torch.nn.Module):
    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.fmt = fmt

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch_print(self.fmt, x, k=3, w=8, p=2)
        return x + 1


def _exported(fmt: str) -> schema.ExportedProgram:
    ep = torch.export.export(_Printing(fmt), (torch.zeros(2),))
    return schema.ExportedProgram.model_validate_json(torch_json(ep))


def _codes(doc: schema.ExportedProgram) -> list[str]:
    return [f.code for f in screen(doc, LIMITS) if f.severity == "error"]


def test_torch_writes_the_print_operator_with_its_format() -> None:
    doc = _exported(ACCEPTED[0])
    [node] = [n for n in doc.graph_module.graph.nodes if n.target == PRINT_TARGET]
    assert node.inputs[0].arg == schema.ArgumentAsString(as_string=ACCEPTED[0])
    assert _codes(doc) == []


@pytest.mark.parametrize("fmt", ACCEPTED + REFUSED)
def test_formats_that_reach_beyond_their_arguments_are_refused(fmt: str) -> None:
    doc = _exported(ACCEPTED[0])
    [node] = [n for n in doc.graph_module.graph.nodes if n.target == PRINT_TARGET]
    node.inputs[0].arg = schema.ArgumentAsString(as_string=fmt)
    assert _codes(doc) == ([] if fmt in ACCEPTED else ["unsafe-format-string"])
    assert _reaches_beyond(fmt) == (fmt in REFUSED)


def _reaches_beyond(fmt: str) -> bool:
    """CPython's own reading: a field whose name its splitter splits into accesses."""
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return True
    return any(
        field is not None
        and (bool(list(_string.formatter_field_name_split(field)[1])) or _reaches_beyond(spec))
        for _, field, spec, _ in parsed
    )


def test_the_refused_walk_reads_the_environment() -> None:
    walk = REFUSED[-2]
    assert walk.format(torch.zeros(1)) == str(os.environ)
