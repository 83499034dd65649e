"""What a document worker imports before its first job: nothing of the registry's database layer.

Each document worker is a fresh interpreter holding what its preload imports for life; the
database layer (SQLAlchemy, Alembic, and through Alembic Mako and Pygments) cost 26 MB in each of
them when a stored-archive job's module pulled in the whole registry package.
"""

from __future__ import annotations

import subprocess
import sys

from app.settings import Settings
from app.workers.runner import document_spec

HEAVY = ("sqlalchemy", "alembic", "mako", "pygments", "torch", "fastapi", "uvicorn")


def test_the_document_preload_leaves_out_the_database_layer_and_torch() -> None:
    preload = document_spec(Settings()).preload
    script = (
        "import importlib, sys\n"
        f"for name in {preload!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
