"""The model registry: named models, numbered immutable versions, aliases, tags, blobs.

Metadata lives in SQLite (embedded default, ``<data_dir>/registry.sqlite3``) or PostgreSQL
(``PT2SERDE_DATABASE_URL``); objects (archive skeletons, tensor payloads, canonical documents)
live once per sha256 in the blob store ``PT2SERDE_BLOB_URL`` names (default ``<data_dir>/blobs``).
"""

from __future__ import annotations

# outbox and search: their tables join the registry's metadata
from app.registry import outbox, search
from app.registry.blobs import BlobStore, Staged
from app.registry.errors import RegistryFailure
from app.registry.ingest import Candidate, prepare
from app.registry.names import LATEST, MAX_VERSION, check_alias, check_model_name
from app.registry.records import (
    AliasInfo,
    CleanupReport,
    ModelInfo,
    ModelPage,
    Pushed,
    PushedVersion,
    VersionDigests,
    VersionInfo,
    VersionPage,
)
from app.registry.store import Registry
from app.registry.summary import Summary, ValueSummary

__all__ = [
    "LATEST",
    "MAX_VERSION",
    "AliasInfo",
    "BlobStore",
    "Candidate",
    "CleanupReport",
    "ModelInfo",
    "ModelPage",
    "Pushed",
    "PushedVersion",
    "Registry",
    "RegistryFailure",
    "Staged",
    "Summary",
    "ValueSummary",
    "VersionDigests",
    "VersionInfo",
    "VersionPage",
    "check_alias",
    "check_model_name",
    "outbox",
    "prepare",
    "search",
]
