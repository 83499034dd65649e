"""The programs other torch releases wrote (`tests/data/release_programs/`), as documents."""

from __future__ import annotations

import zipfile
from pathlib import Path

import schema

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "release_programs"


def archive(name: str) -> Path:
    """The path of one written program (`torch-2.14.1-linalg_polar`)."""
    return WRITTEN / f"{name}.pt2"


def document(name: str) -> schema.ExportedProgram:
    """The program's document, as its release wrote it."""
    with zipfile.ZipFile(archive(name)) as z:
        # torch 2.8 and newer: models/<name>.json; before: one serialized_exported_program.json
        [member] = [
            n
            for n in z.namelist()
            if n.endswith("/models/model.json") or n == "serialized_exported_program.json"
        ]
        return schema.load(z.read(member))
