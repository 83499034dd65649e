"""The S3-compatible backend (AWS S3, SeaweedFS, Ceph RGW, R2, ...) through boto3.

boto3 is the reference client of the S3 API, kept by AWS, and reads the standard AWS_*
variables and config files itself; its transfer manager (s3transfer) uploads large files in
parts, several at once, streamed from the file. Objects are ``<prefix>/<two hex>/<sha256 hex>``;
a PUT (or a completed multipart upload) makes an object visible whole or not at all. Reads
stream one GET from the current position, and a seek elsewhere starts a ranged GET there.
"""

from __future__ import annotations

import functools
import io
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import boto3
import urllib3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError
from urllib3 import BaseHTTPResponse
from urllib3.util.retry import Retry

from app.registry.blobs.base import Listed, Piece, Reader, Upload, is_digest, open_window

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MiB = 1024 * 1024
#: parts one multipart upload has in flight at once
_PARALLEL = 4
#: objects one push uploads at once, and one pull fetches ahead of its read at most (their
#: first MiBs, see packing): small objects' requests wait on the store, not on this CPU
_AHEAD = 16
#: connections kept to the store, for requests of every thread
_POOL = 64
#: a presigned read is used at once; the URL's life only needs to cover the request
_URL_TTL_S = 900
#: GETs are idempotent: connection failures and the store's 5xx answers are retried
_RETRIES = Retry(total=4, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504))
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_KEY = re.compile(r"([0-9a-f]{2})/([0-9a-f]{64})")


def _missing(error: ClientError) -> bool:
    return str(error.response.get("Error", {}).get("Code", "")) in _NOT_FOUND


def client_from_env() -> S3Client:
    """An S3 client configured by AWS_ENDPOINT_URL, AWS_REGION and the usual credentials."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    # S3-compatible servers are addressed by path: their buckets have no DNS names
    config = Config(
        s3={"addressing_style": "path" if endpoint else "auto"},
        retries={"max_attempts": 5, "mode": "standard"},
        max_pool_connections=_POOL,
        # uploads are checked by the store (an object must hold the bytes its sha256 names);
        # a CRC32 of every download would cost a pull as much CPU as its requests: a pulled
        # archive's sha256 is its ETag, for the client to check
        response_checksum_validation="when_required",
    )
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config)


class S3Objects:
    """Objects in one bucket under one key prefix."""

    def __init__(self, bucket: str, prefix: str, part_bytes: int = 16 * MiB) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.location = f"s3://{bucket}/{self.prefix}"
        self.client = client_from_env()
        self.parallel = _AHEAD
        self.read_ahead = _AHEAD
        self._part_bytes = part_bytes
        self._transfer = TransferConfig(
            multipart_threshold=part_bytes,
            multipart_chunksize=part_bytes,
            max_concurrency=_PARALLEL,
        )
        self._http = urllib3.PoolManager(
            maxsize=_POOL, ca_certs=os.environ.get("AWS_CA_BUNDLE") or None
        )
        self._ensure_bucket()

    def _ensure_bucket(self) -> None:
        """Create the bucket when it is missing (an embedded deployment's first start)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as error:
            if not _missing(error):
                raise
            try:
                self.client.create_bucket(Bucket=self.bucket)
            except ClientError as again:
                code = str(again.response.get("Error", {}).get("Code", ""))
                if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

    def key(self, digest: str) -> str:
        """The object's key."""
        return f"{self.prefix}{digest[:2]}/{digest}"

    def exists(self, digest: str) -> bool:
        """Whether the object is stored (one HEAD)."""
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(digest))
        except ClientError as error:
            if _missing(error):
                return False
            raise
        return True

    def carve(self, source: Path, offset: int, size: int, into: Path) -> Piece:
        """The bytes where they are: `put` uploads them straight from `source`."""
        return Piece(source, offset, size)

    def put(self, piece: Piece, digest: str) -> None:
        """Upload the piece: one PUT up to the part size, in parts (several at once) past it,
        streamed from the file."""
        key = self.key(digest)
        whole = piece.offset == 0 and piece.size == piece.path.stat().st_size
        if piece.size > self._part_bytes and whole:
            # the transfer manager reads a file's parts from the file, not into memory
            self.client.upload_file(str(piece.path), self.bucket, key, Config=self._transfer)
            return
        with open_window(piece) as body:
            if piece.size <= self._part_bytes:
                # a transfer manager's threads cost more than a small object's one request
                self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
            else:
                self.client.upload_fileobj(body, self.bucket, key, Config=self._transfer)

    def open(self, digest: str) -> BinaryIO:
        """A seekable reader of the object (FileNotFoundError if it is not stored)."""
        key = self.key(digest)
        # the GET a read needs anyway tells the size: no HEAD first
        raw = _ObjectReader(functools.partial(self._get, key), key)
        return cast(BinaryIO, io.BufferedReader(raw, buffer_size=MiB))

    def _get(self, key: str, start: int) -> BaseHTTPResponse:
        """A streaming GET of the object from byte `start`: a presigned URL fetched by urllib3
        (the HTTP library botocore itself uses), as a botocore call costs a pull of many small
        objects more CPU than their bytes do; signed afresh each time, so never expired."""
        url = self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=_URL_TTL_S
        )
        headers = {"Range": f"bytes={start}-"} if start else {}
        answer = self._http.request(
            "GET", url, headers=headers, preload_content=False, retries=_RETRIES
        )
        if answer.status in (200, 206):
            return answer
        detail = answer.read(1000)
        answer.release_conn()
        if answer.status == 404:
            raise FileNotFoundError(key)
        raise OSError(f"GET {key} answered HTTP {answer.status}: {detail[:300]!r}")

    def remove(self, digest: str) -> None:
        """Delete the object."""
        self.client.delete_object(Bucket=self.bucket, Key=self.key(digest))

    def _keys(self) -> Iterator[dict[str, Any]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        for page in pages:
            yield from cast(list[dict[str, Any]], page.get("Contents", []))

    def listing(self) -> Iterator[Listed]:
        """Every stored object, in key order."""
        for item in self._keys():
            found = _KEY.fullmatch(str(item["Key"])[len(self.prefix) :])
            if found and found.group(2)[:2] == found.group(1) and is_digest(found.group(2)):
                yield Listed(found.group(2), int(item["Size"]), item["LastModified"].timestamp())

    def strays(self) -> list[str]:
        """Keys under the prefix that are not objects of ours."""
        found = []
        for item in self._keys():
            rest = str(item["Key"])[len(self.prefix) :]
            match = _KEY.fullmatch(rest)
            if match is None or match.group(2)[:2] != match.group(1):
                found.append(rest)
        return found

    def remove_stray(self, name: str) -> None:
        """Delete a stray key."""
        self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}{name}")

    def unfinished(self) -> list[Upload]:
        """Multipart uploads under the prefix still in progress (a replica killed mid-upload
        leaves its parts stored, unlisted and billed, until the upload is aborted)."""
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        return [
            Upload(str(item["Key"]), str(item["UploadId"]), item["Initiated"].timestamp())
            for page in pages
            for item in cast(list[dict[str, Any]], page.get("Uploads", []))
        ]

    def abort(self, upload: Upload) -> None:
        """Abort the multipart upload."""
        try:
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=upload.key, UploadId=upload.upload_id
            )
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code", "")) != "NoSuchUpload":
                raise


class _ObjectReader(Reader):
    """An object read through one streaming GET, restarted with a Range where a seek lands."""

    def __init__(self, get: Callable[[int], BaseHTTPResponse], key: str) -> None:
        self._get = get
        self._key = key
        self._body: BaseHTTPResponse | None = get(0)
        self._body_pos = 0
        super().__init__(int(self._body.headers["Content-Length"]))

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        if want <= 0:
            return 0
        if self._body is None or self._body_pos != self._pos:
            self._drop()
            self._body = self._get(self._pos)
        got = self._body.readinto(view[:want])
        if not got:
            raise OSError(f"{self._key} ended at byte {self._pos} of {self._size}")
        self._pos += got
        self._body_pos = self._pos
        return got

    def _drop(self) -> None:
        if self._body is not None:
            if self._body_pos == self._size:
                self._body.release_conn()
            else:
                # unread bytes would have to be drained first: the connection goes instead
                self._body.close()
            self._body = None

    def close(self) -> None:
        self._drop()
        super().close()
