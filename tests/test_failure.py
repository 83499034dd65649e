"""The exception tree drawn in app.failure's docstring is the classes' real hierarchy."""

from __future__ import annotations

import importlib
import pkgutil
import re

import app
import app.failure
import schema

#: One drawn class: the tree's indent, its name and its module.
_DRAWN = re.compile(r"^    (?P<indent>(?:[│ ]   )*)[├└]── (?P<name>\w+) \((?P<module>[\w.]+)\)$")


def _drawn() -> set[tuple[str, str, str]]:
    """(class, module, parent class) for every class the docstring draws."""
    parents = ["Exception"]
    found: set[tuple[str, str, str]] = set()
    for line in (app.failure.__doc__ or "").splitlines():
        match = _DRAWN.match(line)
        if match is None:
            continue
        depth = len(match["indent"]) // 4
        del parents[depth + 1 :]
        found.add((match["name"], match["module"], parents[depth]))
        parents.append(match["name"])
    return found


def _real() -> set[tuple[str, str, str]]:
    """(class, module, its bases) for every public exception class of the project."""
    for package in (schema, app):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            # alembic's migration scripts run only under alembic; __main__ modules run commands
            if ".migrations" not in module.name and not module.name.endswith(".__main__"):
                importlib.import_module(module.name)
    found: set[tuple[str, str, str]] = set()

    def walk(cls: type[BaseException]) -> None:
        for sub in cls.__subclasses__():
            ours = sub.__module__.partition(".")[0] in ("app", "schema")
            if ours and not sub.__name__.startswith("_"):
                bases = ", ".join(base.__name__ for base in sub.__bases__)
                found.add((sub.__name__, sub.__module__, bases))
            walk(sub)

    walk(Exception)
    return found


def test_the_drawn_tree_is_the_real_one() -> None:
    drawn = _drawn()
    assert len(drawn) > 20
    assert drawn == _real()
