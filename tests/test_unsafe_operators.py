"""Registered operators the screen refuses for what they do when run, each held to the pinned
torch: those that reach memory outside their tensors' storage (a view past its storage, or a
storage shrunk under its tensor, built without the check torch's own views take), and the
higher-order operators that compile code their arguments carry, the Python function that
imports a module its argument names, and calls that set an operator's `unsafe` flag."""

from __future__ import annotations

import pytest
import torch

import schema
from app.programs import opset
from app.programs.screen import (
    CODE_CARRYING_HIGHER_ORDER,
    IMPORTING_PYTHON_TARGETS,
    UNCHECKED_MEMORY_OPERATORS,
    UNSAFE_FLAG,
    screen,
    target_problem,
)
from app.settings import Settings
from tests.zoo import torch_json


def _extent(t: torch.Tensor) -> int:
    """Bytes from the storage's start that `t` addresses (no element is read)."""
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return (last + 1) * t.element_size()


def _reinterpret() -> tuple[torch.Tensor, int]:
    base = torch.zeros(4)
    return torch.ops.inductor._reinterpret_tensor(base, [8], [1], 1000), 16


def _alloc_from_pool() -> tuple[torch.Tensor, int]:
    pool = torch.zeros(4)
    return torch.ops.inductor._alloc_from_pool(pool, 4096, torch.float32, [8], [1]), 16


def _resize_storage() -> tuple[torch.Tensor, int]:
    t = torch.zeros(4)
    torch.ops.inductor.resize_storage_bytes_(t, 0)
    return t, 0


BUILDERS = {
    ("inductor", "_reinterpret_tensor"): _reinterpret,
    ("inductor", "_alloc_from_pool"): _alloc_from_pool,
    ("inductor", "resize_storage_bytes_"): _resize_storage,
}


@pytest.mark.parametrize("pair", sorted(BUILDERS), ids=lambda p: f"{p[0]}.{p[1]}")
def test_torch_builds_a_tensor_past_its_storage(pair: tuple[str, str]) -> None:
    view, storage_bytes = BUILDERS[pair]()
    assert view.untyped_storage().nbytes() == storage_bytes
    assert _extent(view) > storage_bytes
    # the same view through torch's checked path is refused
    with pytest.raises(RuntimeError, match="out of bounds for storage"):
        torch.as_strided(
            torch.zeros(storage_bytes // 4), view.shape, view.stride(), view.storage_offset()
        )


def test_the_set_is_what_torch_registers() -> None:
    assert set(BUILDERS) == UNCHECKED_MEMORY_OPERATORS
    assert all(opset.has_operator(*pair) for pair in UNCHECKED_MEMORY_OPERATORS)


def test_inline_asm_compiles_the_assembly_and_constraints_it_is_given() -> None:
    from torch._higher_order_ops.inline_asm_elementwise import _get_jiterator_fn

    assert CODE_CARRYING_HIGHER_ORDER == {"inline_asm_elementwise"}
    assert opset.is_higher_order("inline_asm_elementwise")
    injected = 'r"(in0)); asm("trap;'
    kernel = _get_jiterator_fn("mov.b32 $0, $1;", f"=r,{injected}", 1, torch.int32, torch.int32)
    # the CUDA source torch would compile: the assembly, and the constraint unescaped
    assert "mov.b32 %0, %1;" in kernel.code_string
    assert injected in kernel.code_string


def test_the_autograd_function_target_imports_what_its_argument_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.export.custom_ops as custom_ops

    [target] = IMPORTING_PYTHON_TARGETS
    assert target in opset.python_targets()  # torch writes and reads it back
    imported: list[str] = []
    monkeypatch.setattr(custom_ops.importlib, "import_module", imported.append)
    with pytest.raises(AttributeError):  # (our stand-in import returns None)
        custom_ops._call_custom_autograd_function_in_pre_dispatch("any.module.Class", 1)
    assert imported == ["any.module"]
    assert target_problem(target) is not None


def test_the_operators_with_an_unsafe_flag() -> None:
    flagged = {
        (op.namespace, op.name)
        for op in opset.schemas()
        if any(a.name == UNSAFE_FLAG and a.type == "bool" for a in op.arguments)
    }
    assert flagged == {
        ("aten", "segment_reduce"),
        ("aten", "_index_put_impl"),
        ("aten", "_index_put_impl_"),
    }


def test_segment_reduce_unflagged_checks_and_flagged_reads_past_its_input() -> None:
    storage = torch.arange(8.0)
    data, lengths = storage[:4], torch.tensor([8])
    with pytest.raises(RuntimeError, match="sum to data.size"):
        torch.segment_reduce(data, "sum", lengths=lengths)
    # the four elements after `data` are read (here within its storage: 0 + ... + 7)
    assert torch.segment_reduce(data, "sum", lengths=lengths, unsafe=True).item() == 28.0


class _Segments(torch.nn.Module):
    def __init__(self, unsafe: bool) -> None:
        super().__init__()
        self.unsafe = unsafe

    def forward(self, data: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return torch.segment_reduce(data, "sum", lengths=lengths, unsafe=self.unsafe)


@pytest.mark.parametrize("unsafe", [False, True])
def test_torch_writes_the_flag_and_the_screen_refuses_it_set(unsafe: bool) -> None:
    ep = torch.export.export(_Segments(unsafe), (torch.arange(4.0), torch.tensor([4])))
    doc = schema.ExportedProgram.model_validate_json(torch_json(ep))
    errors = [f for f in screen(doc, Settings().limits) if f.severity == "error"]
    assert [f.code for f in errors] == (["unsafe-operator"] if unsafe else [])
