"""The model registry: named models, numbered immutable versions, aliases, tags, blobs.

Metadata lives in SQLite (embedded default, ``<data_dir>/registry.sqlite3``) or PostgreSQL
(``PT2SERDE_DATABASE_URL``); objects (archive skeletons, tensor payloads, canonical documents)
live once per sha256 in the blob store ``PT2SERDE_BLOB_URL`` names (default ``<data_dir>/blobs``).

The package imports nothing itself (callers import the module they need): a document worker that
reads a stored archive (`app.registry.stored`) must not load the database layer (SQLAlchemy,
Alembic, and through them Mako and Pygments) that the rest of the registry imports, 26 MB in
each of its processes.
"""
