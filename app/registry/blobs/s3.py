"""The S3-compatible backend (AWS S3, SeaweedFS, Ceph RGW, R2, ...) through boto3.

boto3 is the reference client of the S3 API, kept by AWS, and reads the standard AWS_*
variables and config files itself. An object larger than the part size is uploaded in parts,
several at once, each streamed from the file. Objects are ``<prefix>/<two hex>/<sha256 hex>``;
a PUT (or a completed multipart upload) makes an object visible whole or not at all. Reads
stream one GET from the current position, and a seek elsewhere starts a ranged GET there.

The requests a push and a pull make by the hundred (GET, PUT of an object or a part, HEAD)
skip botocore's per-call machinery (endpoint rules, events, signing, parsing), which costs more
CPU than a 4 MiB object's bytes: they are signed here (AWS Signature Version 4, its day's key
kept; a test checks it against botocore's signer) and sent over kept-alive `http.client`
connections, a body from its file by sendfile, an answer read straight into the caller's
buffer. botocore makes the rarer calls (listing, deleting, multipart begin/complete/abort).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import http.client
import io
import mmap
import os
import re
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast
from urllib.parse import quote, urlsplit

import boto3
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from app.registry.blobs.base import Listed, PendingUpload, Piece, Reader, is_digest

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

MiB = 1024 * 1024
#: parts one multipart upload has in flight at once: as many as a push's objects (4 parts of
#: 16 MiB took 2.9 s for 200 MiB on SeaweedFS where 16 took 1.9 s)
_PARALLEL = 16
#: objects one push uploads at once, and one pull fetches ahead of its read at most (their
#: first MiBs, see packing): small objects' requests wait on the store, not on this CPU
_AHEAD = 16
#: connections kept to the store, for requests of every thread
_POOL = 64
#: bytes a reader of an object buffers (small reads, and the tails of large ones)
_BUFFER = 64 * 1024
#: tries of a request (GET, PUT and HEAD are idempotent): a kept-alive connection the store
#: closed meanwhile, a connection failure or a 5xx answer is tried again on a new connection
_TRIES = 5
#: seconds before the n-th try again (the first, most often a stale connection, at once)
_BACKOFF_S = 0.2
#: seconds a connection, or a read or write on it, may wait (botocore's default)
_TIMEOUT_S = 60.0
#: the sha256 of no bytes: the signed payload of a GET or HEAD
_EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_KEY = re.compile(r"([0-9a-f]{2})/([0-9a-f]{64})")


def _missing(error: ClientError) -> bool:
    return str(error.response.get("Error", {}).get("Code", "")) in _NOT_FOUND


def client_from_env() -> tuple[S3Client, Credentials | None]:
    """An S3 client configured by AWS_ENDPOINT_URL, AWS_REGION and the usual credentials, and
    those credentials (None: the store is used anonymously)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    # S3-compatible servers are addressed by path: their buckets have no DNS names
    config = Config(
        s3={"addressing_style": "path" if endpoint else "auto"},
        retries={"max_attempts": 5, "mode": "standard"},
        max_pool_connections=_POOL,
    )
    session = boto3.session.Session()
    client = session.client("s3", endpoint_url=endpoint, region_name=region, config=config)
    return client, session.get_credentials()


class S3Objects:
    """Objects in one bucket under one key prefix."""

    def __init__(self, bucket: str, prefix: str, part_bytes: int = 16 * MiB) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.location = f"s3://{bucket}/{self.prefix}"
        self.client, credentials = client_from_env()
        self.parallel = _AHEAD
        self.read_ahead = _AHEAD
        self._part_bytes = part_bytes
        self._ensure_bucket()
        self._store = _Requests(self.client, credentials, bucket)

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
        key = self.key(digest)
        answer, connection = self._store.send("HEAD", key, {})
        self._store.finish(answer, connection)
        if answer.status == 404:
            return False
        if answer.status != 200:
            raise OSError(f"HEAD {key} answered HTTP {answer.status}")
        return True

    def carve(self, source: Path, offset: int, size: int, into: Path) -> Piece:
        """The bytes where they are (`put` uploads them straight from `source`), hashed here:
        a push's payloads are hashed by the blob threads side by side, not one after another
        by the thread that writes the skeleton."""
        with source.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            with memoryview(m) as view:
                if offset + size > len(view):
                    raise OSError(f"{source} ends before byte {offset + size}")
                # the page cache's bytes hashed where they are (the GIL released meanwhile)
                digest = hashlib.sha256(view[offset : offset + size]).hexdigest()
        return Piece(source, offset, size, digest=digest)

    def put(self, piece: Piece, digest: str, replace: bool = False) -> None:
        """Upload the piece: one PUT up to the part size, in parts (several at once) past it,
        streamed from the file (a PUT replaces the object there in any case)."""
        key = self.key(digest)
        if piece.size <= self._part_bytes:
            # one request, signed with its bytes' sha256 (the object's digest, unless the piece
            # is an encoded form and says its own; a store that checks payloads, as AWS S3
            # does, refuses other bytes): nothing hashes them again
            self._put_bytes(key, piece, piece.digest or digest, None)
            return
        # botocore begins, completes and aborts; the parts go as single PUTs do
        upload = str(self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"])
        spans = [
            Piece(piece.path, piece.offset + at, min(self._part_bytes, piece.size - at))
            for at in range(0, piece.size, self._part_bytes)
        ]
        try:
            with ThreadPoolExecutor(_PARALLEL, "s3-parts") as pool:
                put = functools.partial(self._put_part, key, upload)
                tags = list(pool.map(put, range(1, len(spans) + 1), spans))
            parts: list[CompletedPartTypeDef] = [
                {"ETag": tag, "PartNumber": n} for n, tag in enumerate(tags, 1)
            ]
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            raise

    def _put_part(self, key: str, upload: str, number: int, part: Piece) -> str:
        """Upload the part `number` (its sha256 signed, as an object's is); its ETag."""
        digest = self.carve(part.path, part.offset, part.size, part.path).digest
        query = {"partNumber": str(number), "uploadId": upload}
        return self._put_bytes(key, part, str(digest), query)

    def _put_bytes(self, key: str, piece: Piece, digest: str, query: dict[str, str] | None) -> str:
        """One PUT of the piece's bytes (whose sha256 is `digest`); the answer's ETag."""
        length = {"Content-Length": str(piece.size)}
        answer, connection = self._store.send("PUT", key, length, piece, digest, query)
        detail = self._store.finish(answer, connection)
        if answer.status != 200:
            raise OSError(f"PUT {key} answered HTTP {answer.status}: {detail[:300]!r}")
        return str(answer.headers.get("ETag", ""))

    def open(self, digest: str) -> BinaryIO:
        """A seekable reader of the object (FileNotFoundError if it is not stored)."""
        key = self.key(digest)
        # the GET a read needs anyway tells the size: no HEAD first
        raw = _ObjectReader(functools.partial(self._get, key), self._store, key)
        # a small buffer: a read larger than it goes straight into the caller's buffer, a smaller
        # one through it; a read a rebuilt archive cuts at an object's end would otherwise pass
        # (with all that follows it) through a buffer as large as the reads
        return cast(BinaryIO, io.BufferedReader(raw, buffer_size=_BUFFER))

    def _get(self, key: str, start: int) -> _Answer:
        """A streaming GET of the object from byte `start`, its connection kept until read."""
        headers = {"Range": f"bytes={start}-"} if start else {}
        answer, connection = self._store.send("GET", key, headers)
        if answer.status in (200, 206):
            return answer, connection
        detail = self._store.finish(answer, connection)
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

    def unfinished(self) -> list[PendingUpload]:
        """Multipart uploads under the prefix still in progress (a replica killed mid-upload
        leaves its parts stored, unlisted and billed, until the upload is aborted)."""
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        return [
            PendingUpload(str(item["Key"]), str(item["UploadId"]), item["Initiated"].timestamp())
            for page in pages
            for item in cast(list[dict[str, Any]], page.get("Uploads", []))
        ]

    def abort(self, upload: PendingUpload) -> None:
        """Abort the multipart upload."""
        try:
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=upload.key, UploadId=upload.upload_id
            )
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code", "")) != "NoSuchUpload":
                raise


_Answer = tuple[http.client.HTTPResponse, http.client.HTTPConnection]


class SigV4:
    """AWS Signature Version 4 in a request's headers, for S3 (its path signed as it is sent),
    with the payload's sha256 given: an object's digest, or that of no bytes."""

    def __init__(self, credentials: Credentials, region: str, host: str) -> None:
        self._credentials = credentials
        self._region = region
        self._host = host
        self._key: tuple[str, str, bytes] = ("", "", b"")

    def _signing_key(self, secret: str, day: str) -> bytes:
        """The day's key, derived once a day (four HMACs a request otherwise)."""
        if self._key[:2] != (secret, day):
            key = f"AWS4{secret}".encode()
            for part in (day, self._region, "s3", "aws4_request"):
                key = hmac.digest(key, part.encode(), "sha256")
            self._key = (secret, day, key)
        return self._key[2]

    def sign(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        payload: str,
        now: float,
    ) -> dict[str, str]:
        """The headers with the signature's (Host, X-Amz-Date, ..., Authorization) added; `target`
        is the path and query as sent (encoded)."""
        # frozen: a refreshing credential must not change between the key and the secret
        frozen = self._credentials.get_frozen_credentials()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        added = {"Host": self._host, "X-Amz-Content-SHA256": payload, "X-Amz-Date": stamp}
        if frozen.token:
            added["X-Amz-Security-Token"] = frozen.token
        every = {**headers, **added}
        signed = sorted((name.lower(), " ".join(str(v).split())) for name, v in every.items())
        names = ";".join(name for name, _ in signed)
        path, _, query = target.partition("?")
        # a query's parameters sorted (ours are encoded already, as sent)
        ordered = "&".join(sorted(query.split("&"))) if query else ""
        canonical = "\n".join(
            [method, path, ordered, *(f"{n}:{v}" for n, v in signed), "", names, payload]
        )
        scope = f"{stamp[:8]}/{self._region}/s3/aws4_request"
        text = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{_sha256(canonical.encode())}"
        key = self._signing_key(frozen.secret_key or "", stamp[:8])
        signature = hmac.new(key, text.encode(), "sha256").hexdigest()
        every["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={frozen.access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}"
        )
        return every


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Requests:
    """Signed requests for objects of one bucket, over kept-alive connections to the store."""

    def __init__(self, client: S3Client, credentials: Credentials | None, bucket: str) -> None:
        # where botocore's endpoint rules put an object of this bucket (path or virtual host)
        example = client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60
        )
        url = urlsplit(example)
        self._path = url.path[: -len("k")]
        self._host = url.hostname or ""
        self._port = url.port
        self._tls: ssl.SSLContext | None = None
        if url.scheme == "https":
            self._tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None)
        self._signer = None
        if credentials is not None:
            self._signer = SigV4(credentials, client.meta.region_name, url.netloc)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        # as the backend has no close: its kept connections go when it does
        weakref.finalize(self, _close_all, self._idle)

    def _connection(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        connection: http.client.HTTPConnection
        if self._tls is not None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=_TIMEOUT_S, context=self._tls
            )
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=_TIMEOUT_S)
        connection.response_class = _Response
        return connection

    def release(self, connection: http.client.HTTPConnection) -> None:
        """Keep a connection whose last answer was read to its end, for the next request."""
        with self._lock:
            if len(self._idle) < _POOL:
                self._idle.append(connection)
                return
        connection.close()

    def finish(self, answer: http.client.HTTPResponse, connection: Any) -> bytes:
        """Read a short answer to its end (its text) and release its connection."""
        detail = answer.read()
        self.release(connection)
        return detail

    def send(
        self,
        method: str,
        key: str,
        headers: dict[str, str],
        body: Piece | None = None,
        payload: str = _EMPTY_SHA256,
        query: dict[str, str] | None = None,
    ) -> _Answer:
        """Send the request (the piece's bytes as its body) and read the answer's head."""
        path = self._path + quote(key, safe="/~")
        if query:
            path += "?" + "&".join(f"{k}={quote(v, safe='-_.~')}" for k, v in query.items())
        for attempt in range(_TRIES):
            signed = headers
            if self._signer is not None:
                signed = self._signer.sign(method, path, headers, payload, time.time())
            connection = self._connection()
            try:
                connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for name, value in signed.items():
                    connection.putheader(name, value)
                connection.endheaders()
                if body is not None:
                    _send_piece(connection, body)
                answer = connection.getresponse()
            except (OSError, http.client.HTTPException):
                connection.close()
                if attempt == _TRIES - 1:
                    raise
            else:
                if answer.status < 500 or attempt == _TRIES - 1:
                    return answer, connection
                self.finish(answer, connection)
            time.sleep(_BACKOFF_S * attempt)
        raise AssertionError("unreachable: the last try returns or raises")


class _Response(http.client.HTTPResponse):
    """An answer that closes its reading end of the socket when its head cannot be read (a
    connection the store dropped): left to the garbage collector, the socket would be found
    unclosed there."""

    def begin(self) -> None:
        try:
            super().begin()
        except BaseException:
            self.close()
            raise


def _send_piece(connection: http.client.HTTPConnection, piece: Piece) -> None:
    """Send the piece's bytes as the request's body, from the file to the socket in the kernel
    (over TLS, where the kernel cannot, read and sent a block at a time)."""
    if connection.sock is None:
        raise ConnectionError("the connection closed before its request's body was sent")
    with piece.path.open("rb") as source:
        sent = connection.sock.sendfile(source, piece.offset, piece.size)
    if sent != piece.size:
        raise OSError(f"{piece.path} ended before {piece.size} bytes from {piece.offset}")


def _close_all(connections: list[http.client.HTTPConnection]) -> None:
    for connection in connections:
        connection.close()


class _ObjectReader(Reader):
    """An object read through one streaming GET, restarted with a Range where a seek lands."""

    def __init__(self, get: Callable[[int], _Answer], store: _Requests, key: str) -> None:
        self._get = get
        self._store = store
        self._key = key
        self._body: _Answer | None = get(0)
        self._body_pos = 0
        super().__init__(int(self._body[0].headers["Content-Length"]))

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        if want <= 0:
            return 0
        if self._body is None or self._body_pos != self._pos:
            self._drop()
            self._body = self._get(self._pos)
        got = self._body[0].readinto(view[:want])
        if not got:
            raise OSError(f"{self._key} ended at byte {self._pos} of {self._size}")
        self._pos += got
        self._body_pos = self._pos
        return got

    def _drop(self) -> None:
        if self._body is not None:
            answer, connection = self._body
            if answer.isclosed():
                self._store.release(connection)
            else:
                # unread bytes would have to be drained first: the connection goes instead
                connection.close()
            self._body = None

    def close(self) -> None:
        self._drop()
        super().close()
