"""The one walk of a document's JSON tree along a description: every place with its torch type.

Upgrades (7.x -> 8.x rewrites) and downgrades (dropping keys an older reader does not know)
work on the tree rather than on models, since what they write is not the current schema.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from schema.description import Description, TypeExpr, parse_type


@dataclass(frozen=True, slots=True)
class Place:
    """One value of the tree: `parent[key]`, of torch type `type`, at `path` (its segments)."""

    parent: Any
    key: Any
    type: TypeExpr
    path: tuple[str | int, ...]

    @property
    def value(self) -> Any:
        """The value as it is now (a consumer may have rewritten it)."""
        return self.parent[self.key]


def places(
    tree: Any,
    description: Description,
    root: str,
    enter: Callable[[str], bool] | None = None,
) -> Iterator[Place]:
    """Every place of `tree` (a document of type `root`), parents before their children.

    A consumer may rewrite a value (or delete keys of a struct) when it is handed its place:
    the walk descends into what is there once the consumer is done. Values that do not have
    their type's shape are not descended into (validation reports them). With `enter`, structs
    and unions whose type name it refuses are handed over but not descended into.
    """
    types = {name: spec for name, spec in description.items() if isinstance(spec, dict)}
    parsed: dict[str, TypeExpr] = {}

    def parse(text: str) -> TypeExpr:
        if text not in parsed:
            parsed[text] = parse_type(text)
        return parsed[text]

    holder: list[Any] = [tree]
    stack: list[Place] = [Place(holder, 0, TypeExpr(root), ())]
    while stack:
        place = stack.pop()
        yield place
        t, value, path = place.type, place.value, place.path
        if t.name == "Optional" and value is not None:
            stack.append(Place(place.parent, place.key, t.args[0], path))
        elif t.name == "List" and isinstance(value, list):
            stack.extend(
                Place(value, i, t.args[0], (*path, i)) for i in reversed(range(len(value)))
            )
        elif t.name == "Dict" and isinstance(value, dict):
            stack.extend(Place(value, k, t.args[1], (*path, k)) for k in reversed(list(value)))
        elif t.name in types and isinstance(value, dict) and (enter is None or enter(t.name)):
            spec = types[t.name]
            fields = spec["fields"]
            if spec["kind"] == "union":
                if len(value) == 1:
                    arm = next(iter(value))
                    if arm in fields:
                        stack.append(Place(value, arm, parse(fields[arm]["type"]), (*path, arm)))
            elif spec["kind"] == "struct":
                present = [f for f in fields if f in value]
                stack.extend(
                    Place(value, f, parse(fields[f]["type"]), (*path, f)) for f in reversed(present)
                )
