"""Treespec contexts are read as torch reads them: the screen's view of a context is Python's
json with torch's enum hook, so no context hides an enum from us that torch would import."""

from __future__ import annotations

import json

import pytest
import torch.utils._pytree as pytree

from app.programs.screen import BUILTIN_CONTAINERS, PYTREE_PLACEHOLDER, _treespec_node

ENUM = json.dumps({"__enum__": True, "fqn": "enum:Enum", "name": "x"})


def test_the_placeholder_is_torchs_and_refused_as_a_type_or_namedtuple() -> None:
    assert PYTREE_PLACEHOLDER == pytree.NO_SERIALIZED_TYPE_NAME_FOUND
    for kind, context in (
        (PYTREE_PLACEHOLDER, "[]"),
        ("collections.namedtuple", PYTREE_PLACEHOLDER),
    ):
        problem = _treespec_node({"type": kind, "context": context, "children_spec": []}, set())
        assert problem is not None
        assert "placeholder" in problem


@pytest.mark.parametrize(
    "context",
    [
        f"[NaN, {ENUM}]",
        f"[Infinity, {ENUM}]",
        f"[{ENUM}, {'1' * 5000}]",  # past Python's int digit limit, after the hook has run
        f'[{ENUM}, "\\ud800"]',
        f"[{ENUM}, " + "[" * 100_000,  # the parse fails (too deep) after the enum
        f"[{ENUM}",  # truncated
        f'{{"a": {{"b": [1, {ENUM}]}}}}',
    ],
    ids=["nan", "infinity", "long-int", "lone-surrogate", "deep", "truncated", "nested"],
)
@pytest.mark.parametrize("kind", ["mylib.Output", "builtins.dict"])
def test_an_enum_torch_would_import_is_refused(
    context: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    imported: list[str] = []
    monkeypatch.setattr(pytree.importlib, "import_module", imported.append)
    with pytest.raises(Exception):  # noqa: B017, PT011 (whatever torch fails with)
        pytree._json_to_treespec({"type": "builtins.dict", "context": context, "children_spec": []})
    assert imported == ["enum"]  # torch's own reading imports the module
    problem = _treespec_node({"type": kind, "context": context, "children_spec": []}, set())
    assert problem is not None
    assert "enum" in problem


@pytest.mark.parametrize("context", ["not json", "[1,", "[" * 100_000])
def test_an_unreadable_context_is_refused_only_for_torchs_own_types(context: str) -> None:
    special = {"collections.defaultdict", "collections.namedtuple"}  # contexts of their own
    for kind in ("mylib.Output", *sorted(BUILTIN_CONTAINERS - special)):
        node = {"type": kind, "context": context, "children_spec": []}
        problem = _treespec_node(node, set())
        assert (problem is None) == (kind == "mylib.Output"), (kind, problem)
