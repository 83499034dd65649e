"""pt2serde: what a program that uses pt2serde imports.

    import pt2serde

    doc = pt2serde.load(data)                  # torch's JSON -> pt2serde.ExportedProgram
    assert pt2serde.dump(doc) == data          # ... and back, in torch's wire form
    with pt2serde.Client("http://127.0.0.1:8000", token=token) as registry:
        registry.push("resnet", "resnet.pt2")

The code lives in the distribution's two other import packages, `schema` (the wire contract:
`pt2serde.schema`) and `app` (the service, the CLI and `Client`); this package is the one name
a user writes, so what those are called can change without changing a user's code
(docs/architecture.md, "The import name"). Importing it imports neither torch nor the server's
dependencies: `Client` and its failures are loaded on first use, and `__version__` (the
installed distribution's) is read when first asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any


def _ensure_ours(name: str) -> None:
    """ImportError, in one line that names both, when the package `name` that Python finds first
    is not the one installed beside this one (a user's own `app/`, PyPI's `schema`)."""
    ours = Path(__file__).resolve().parent.parent / name
    spec = importlib.util.find_spec(name)
    found = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
    if found != ours:
        raise ImportError(
            f"pt2serde needs its package {name!r} ({ours}), but Python finds {found} first: "
            f"a package of that name earlier on sys.path hides it (rename that one, or put "
            f"it later on sys.path)",
            name=name,
        )


for _name in ("schema", "app"):
    _ensure_ours(_name)

import schema  # noqa: E402 - only once _ensure_ours has found it is ours
from schema import (  # noqa: E402
    CURRENT,
    DocumentInvalid,
    ExportedProgram,
    Issue,
    SchemaError,
    dump,
    load,
    read,
)

if TYPE_CHECKING:
    from app.client import (
        Client,
        ClientFailure,
        Conflict,
        Forbidden,
        InvalidProgram,
        NotFound,
        Unavailable,
    )

    __version__: str

#: What app.client gives, imported when first asked for (it needs the `server` extra).
_FROM_CLIENT = (
    "Client",
    "ClientFailure",
    "Conflict",
    "Forbidden",
    "InvalidProgram",
    "NotFound",
    "Unavailable",
)

__all__ = [
    "CURRENT",
    "Client",
    "ClientFailure",
    "Conflict",
    "DocumentInvalid",
    "ExportedProgram",
    "Forbidden",
    "InvalidProgram",
    "Issue",
    "NotFound",
    "SchemaError",
    "Unavailable",
    "__version__",
    "dump",
    "load",
    "read",
    "schema",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        import app

        return app.version()
    if name in _FROM_CLIENT:
        return getattr(importlib.import_module("app.client"), name)
    raise AttributeError(f"module 'pt2serde' has no attribute {name!r}")
