"""The blob store seam: content-addressed objects in a local directory or an S3-compatible store.

`PT2SERDE_BLOB_URL` chooses the backend: empty (``<data_dir>/blobs``, the embedded default),
``file:///path`` or ``s3://bucket/prefix`` (endpoint and credentials from the standard AWS_*
variables). Whatever the backend, uploads are received and archives written in this process's
local staging directory first (`staging`), then placed as objects named by their sha256.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from app.registry.blobs.base import Listed, Objects, Piece, is_digest
from app.registry.blobs.local import LocalObjects
from app.registry.blobs.staging import Staged, Staging
from app.registry.errors import RegistryFailure
from app.settings import Settings

__all__ = ["BlobStore", "Listed", "Objects", "Piece", "Staged", "is_digest", "objects_for"]


def objects_for(url: str, data_dir: Path, part_bytes: int) -> Objects:
    """The backend `url` names ("" is ``<data_dir>/blobs``)."""
    if not url:
        return LocalObjects(data_dir / "blobs")
    parts = urlsplit(url)
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path:
        return LocalObjects(Path(unquote(parts.path)))
    if parts.scheme == "s3" and parts.netloc:
        # imported here: boto3 is only needed by deployments that use S3
        from app.registry.blobs.s3 import S3Objects

        return S3Objects(parts.netloc, unquote(parts.path), part_bytes)
    raise RegistryFailure(
        "registry-unavailable",
        f"PT2SERDE_BLOB_URL must be file:///path or s3://bucket/prefix, not {url!r}",
    )


class BlobStore:
    """This process's staging directory and the objects of the configured backend."""

    def __init__(self, settings: Settings) -> None:
        self.objects = objects_for(
            settings.blob_url, settings.data_dir, settings.blob_part_mb * 1024 * 1024
        )
        self.staging = Staging(settings.data_dir)
        #: threads a push readies, uploads and re-checks its objects on (`objects.parallel` at
        #: once in this process), started once: a push would spend more starting its own
        self.workers = ThreadPoolExecutor(self.objects.parallel, "blobs")

    def close(self) -> None:
        """Remove this process's staging directory."""
        self.workers.shutdown(wait=True, cancel_futures=True)
        self.staging.close()

    def stage(self) -> Staged:
        """A new empty file in this process's staging directory."""
        return self.staging.stage()

    def stage_bytes(self, data: bytes) -> Staged:
        """Bytes staged and finished."""
        return self.staging.stage_bytes(data)

    def place(self, staged: Staged) -> str:
        """Store a finished staged file as its object (kept if stored already) and drop it."""
        digest = staged.finish()
        try:
            self.objects.put(Piece(staged.path, 0, staged.size), digest)
        finally:
            staged.discard()
        return digest

    def exists(self, digest: str) -> bool:
        """Whether the object is stored."""
        return self.objects.exists(digest)

    def open(self, digest: str) -> BinaryIO:
        """The object for reading, seekable (FileNotFoundError if it is not stored)."""
        return self.objects.open(digest)

    def remove(self, digest: str) -> None:
        """Delete an object (callers hold the registry's blob lock exclusively)."""
        self.objects.remove(digest)

    def listing(self) -> Iterator[Listed]:
        """Every stored object."""
        return self.objects.listing()

    def sweep(self) -> list[str]:
        """Remove the staging directories of processes that are gone; their names."""
        return self.staging.sweep()
