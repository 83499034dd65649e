"""Request bodies streamed to files with the size cap checked while reading.

A body is a `.pt2` (application/zip), a JSON document (application/json), or a multipart form
whose parts are either. `receive` puts them in a temporary folder removed when the request ends,
whatever happens; `stream_body` and `FormSplitter` also serve routes that keep an upload (the
registry streams its archive straight into its staging area).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from inspect import isawaitable
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

from fastapi import Request
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect

from app.http.cycle import RECVFILE
from app.http.problems import ServiceError
from app.settings import Settings

Media = Literal["zip", "json", "safetensors", "yaml"]
_ZIP_TYPES = {"application/zip", "application/x-zip-compressed"}
#: declared types that say nothing about the content: the first bytes decide.
_OPAQUE_TYPES = {"", "application/octet-stream"}
_JSON_TYPES = {"application/json"}
_YAML_TYPES = {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}
_CALLBACKS = (
    "on_part_begin",
    "on_header_field",
    "on_header_value",
    "on_header_end",
    "on_headers_finished",
    "on_part_data",
    "on_part_end",
)


@dataclass
class Part:
    """One received body or form part, on disk."""

    name: str
    path: Path
    size: int
    media: Media
    filename: str = ""

    def read(self) -> bytes:
        """The part's bytes (callers read only parts bounded by the upload limit)."""
        return self.path.read_bytes()


@dataclass
class Upload:
    """Every part of one request, by form field name (`body` for a plain body)."""

    parts: dict[str, Part] = field(default_factory=dict)

    def one(self, *names: str) -> Part:
        """The first present part among `names`, or the plain body; missing-part otherwise."""
        for name in (*names, "body"):
            if name in self.parts:
                return self.parts[name]
        raise ServiceError("missing-part", f"expected a form field {' or '.join(names)!r}")

    def need(self, name: str) -> Part:
        """The part `name`, or missing-part."""
        if name not in self.parts:
            raise ServiceError("missing-part", f"expected a form field {name!r}")
        return self.parts[name]


def sniff(head: bytes) -> Media | None:
    """The media of a part from its first bytes."""
    if head.startswith(b"PK"):
        return "zip"
    stripped = head.lstrip()
    if stripped.startswith((b"{", b"[")):
        return "json"
    if len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    if stripped[:1].isalpha() or stripped.startswith(b"#"):
        return "yaml"
    return None


def content_type(request: Request) -> tuple[str, dict[bytes, bytes]]:
    """The request's declared media type (lowercase, "" when absent) and its parameters."""
    declared, options = parse_options_header(request.headers.get("content-type", ""))
    return declared.decode("latin-1").lower(), options


async def stream_body(
    request: Request,
    limit: int,
    write: Callable[[bytes], object],
    idle_s: float,
    hint: str = "",
) -> int:
    """Feed the request body to `write` as it arrives (awaiting what it returns, if that is
    awaitable: a `Spool` making room); its size, refused over `limit` or empty, or when `idle_s`
    seconds pass without a byte (a client that stalls holds its connection and its upload's
    file)."""
    _refuse_declared(request, limit, hint)
    size = 0
    loop = asyncio.get_running_loop()
    try:
        # one deadline moved on as each chunk comes (wait_for would make a task per 64 KiB chunk)
        async with asyncio.timeout_at(loop.time() + idle_s if idle_s > 0 else None) as deadline:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ServiceError("payload-too-large", _too_large(limit, hint))
                written = write(chunk)
                if isawaitable(written):
                    await written
                if idle_s > 0:
                    deadline.reschedule(loop.time() + idle_s)
    except ClientDisconnect:
        raise ServiceError("bad-request", "the client disconnected mid-upload") from None
    except TimeoutError:
        raise ServiceError("body-timeout", f"the body sent nothing for {idle_s} seconds") from None
    return _not_empty(size)


def _too_large(limit: int, hint: str) -> str:
    return f"the body is over the limit of {limit} bytes{hint}"


def _refuse_declared(request: Request, limit: int, hint: str) -> None:
    """payload-too-large for a declared length over `limit`, before a byte is read."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ServiceError("payload-too-large", _too_large(limit, hint))


def _not_empty(size: int) -> int:
    if size == 0:
        raise ServiceError("bad-request", "the request body is empty")
    return size


async def store_body(request: Request, path: Path, settings: Settings, hint: str) -> int:
    """A plain body in the new file `path`, refused as `stream_body` refuses it; its size.

    A large body (`direct_body_bytes` or more) goes from the socket to the file by splice, never
    through the service, where the protocol offers it (`RECVFILE`, a body with a Content-Length);
    any other through a `Spool`. A connection closing after a large body's answer costs its
    client a new connection, a trifle beside such a body."""
    limit = settings.max_upload_bytes
    idle_s = settings.body_idle_timeout_s
    direct = request.scope.get("extensions", {}).get(RECVFILE)
    length = request.headers.get("content-length", "")
    if direct is None or not length.isdigit() or int(length) < settings.direct_body_bytes:
        spool = Spool(path)
        try:
            streamed = await stream_body(request, limit, spool.write, idle_s, hint)
        except BaseException:
            await spool.close(complete=False)
            raise
        await spool.close()
        return streamed
    _refuse_declared(request, limit, hint)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        size: int = await direct["into"](fd, idle_s)
    finally:
        os.close(fd)  # the receiving thread has its own descriptor, and is done with it
    return _not_empty(size)


#: What a `Spool` gathers before it hands the bytes to its thread: a 350 MB body in under a
#: hundred writes, each one system call.
SPOOL_BATCH = 4 * 1024 * 1024


class Spool:
    """A body written to a new file on a helper thread, a batch at a time, while the event loop
    takes the next chunks from the socket (one batch in flight; `write` returns what to await
    when the next must wait for it). `close` writes the rest and waits for every write."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._batch: list[bytes] = []
        self._size = 0
        self._writing: asyncio.Future[None] | None = None

    def write(self, chunk: bytes) -> Awaitable[None] | None:
        """Take a chunk; past a batch's worth, what hands the batch over."""
        self._batch.append(chunk)
        self._size += len(chunk)
        return self._hand_over() if self._size >= SPOOL_BATCH else None

    async def _hand_over(self) -> None:
        batch, self._batch, self._size = self._batch, [], 0
        if self._writing is not None:
            await asyncio.shield(self._writing)
        self._writing = asyncio.get_running_loop().run_in_executor(
            None, _write_all, self._fd, batch
        )

    async def close(self, *, complete: bool = True) -> None:
        """Write what is left (unless the body is given up) and wait for the writes; the file
        is closed once no write is under way, even if this wait is cancelled."""
        try:
            if complete and self._batch:
                await self._hand_over()
            if self._writing is not None:
                # shielded: a cancelled wait must not mark the write done while its thread runs
                await asyncio.shield(self._writing)
        except Exception:
            if complete:
                raise  # a body given up has its own failure to report
        finally:
            writing = self._writing
            if writing is None or writing.done():
                os.close(self._fd)
            else:
                writing.add_done_callback(lambda _: os.close(self._fd))


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Append `chunks` to the file, in one system call unless the kernel takes less."""
    written = os.writev(fd, chunks)
    if written == sum(len(chunk) for chunk in chunks):
        return
    rest = memoryview(b"".join(chunks))[written:]
    while rest:
        rest = rest[os.write(fd, rest) :]


def _media(declared: str, path: Path) -> Media:
    """A declared JSON or zip type is taken at its word (the readers then say precisely what is
    wrong); an opaque one is decided by the first bytes."""
    if declared in _JSON_TYPES:
        return "json"
    if declared in _ZIP_TYPES:
        return "zip"
    if declared in _YAML_TYPES:
        return "yaml"
    with path.open("rb") as f:
        sniffed = sniff(f.read(16))
    if sniffed is None:
        raise ServiceError("unsupported-media-type", "cannot tell what the uploaded part is")
    return sniffed


@dataclass(frozen=True)
class PartHeader:
    """What a form part's headers say: its field name, file name and declared media type."""

    name: str
    filename: str
    content_type: str


class PartTarget(Protocol):
    """Where the parts of a form go as they arrive."""

    def begin_part(self, header: PartHeader) -> Callable[[bytes], object]:
        """The writer of this part's bytes; a ServiceError refuses the part."""

    def end_part(self, header: PartHeader, size: int) -> None:
        """The part's last byte was written (it had `size` bytes, at least one)."""


#: What one part's headers may add up to: a form part needs a Content-Disposition and maybe a
#: Content-Type, so more is a flood meant to cost memory, not a form.
MAX_PART_HEADER_BYTES = 16 * 1024


class FormSplitter:
    """A multipart/form-data body, fed as it arrives, split into parts written through `target`."""

    def __init__(self, boundary: bytes | None, target: PartTarget, max_parts: int) -> None:
        if not boundary:
            raise ServiceError("bad-multipart", "the multipart body has no boundary")
        self.target = target
        self.max_parts = max_parts
        self._count = 0
        self._begun = 0
        self._header_bytes = 0
        self._field = b""
        self._value = b""
        self._headers: dict[bytes, bytes] = {}
        self._header: PartHeader | None = None
        self._write: Callable[[bytes], object] | None = None
        self._size = 0
        callbacks = {name: getattr(self, f"_{name}") for name in _CALLBACKS}
        # the parser refuses some boundaries (over 256 bytes) as it is built
        self._parser: MultipartParser = self._guarded(MultipartParser, boundary, callbacks)

    def feed(self, chunk: bytes) -> None:
        """Parse the next bytes of the body."""
        self._guarded(self._parser.write, chunk)

    def finish(self) -> None:
        """Check that the body ended properly and held at least one part."""
        self._guarded(self._parser.finalize)
        if not self._count:
            raise ServiceError("bad-multipart", "the multipart body has no parts")

    @staticmethod
    def _guarded(step: Callable[..., Any], *args: object) -> Any:
        try:
            return step(*args)
        except ServiceError:
            raise
        except Exception as exc:  # python-multipart raises several error types for bad bodies
            message = f"the multipart body cannot be read: {exc}"
            raise ServiceError("bad-multipart", message) from None

    def _on_part_begin(self) -> None:
        # counted as parts begin: tiny or refused parts cost bookkeeping too
        self._begun += 1
        if self._begun > self.max_parts:
            raise ServiceError(
                "too-many-parts", f"the multipart body has more than {self.max_parts} parts"
            )
        self._headers = {}
        self._header_bytes = 0

    def _header_grew(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_PART_HEADER_BYTES:
            raise ServiceError(
                "bad-multipart",
                f"a form part's headers are over {MAX_PART_HEADER_BYTES} bytes",
            )

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_grew(end - start)
        self._field += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_grew(end - start)
        self._value += data[start:end]

    def _on_header_end(self) -> None:
        self._headers[self._field.lower()] = self._value
        self._field, self._value = b"", b""

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if not name:
            raise ServiceError("bad-multipart", "a form part has no name")
        declared = parse_options_header(self._headers.get(b"content-type", b""))[0]
        self._header = PartHeader(
            name,
            options.get(b"filename", b"").decode("utf-8", "replace"),
            declared.decode("latin-1").lower(),
        )
        self._write = self.target.begin_part(self._header)
        self._size = 0

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        assert self._write is not None
        self._write(data[start:end])
        self._size += end - start

    def _on_part_end(self) -> None:
        assert self._header is not None
        header, self._header, self._write = self._header, None, None
        if self._size == 0:
            raise ServiceError("bad-request", f"the form part {header.name!r} is empty")
        self._count += 1
        self.target.end_part(header, self._size)


class _PartFiles:
    """Each form part to a file of its own in `folder`, with its media decided once written;
    each part is held to the upload limit on its own (a diff's two archives may each reach it)."""

    def __init__(self, folder: Path, limit: int, hint: str) -> None:
        self.folder = folder
        self.limit = limit
        self.hint = hint
        self.parts: dict[str, Part] = {}
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._written = 0

    def begin_part(self, header: PartHeader) -> Callable[[bytes], object]:
        """A new file for the part (a field may come once)."""
        if header.name in self.parts:
            raise ServiceError("bad-multipart", f"the form field {header.name!r} is repeated")
        self._path = self.folder / f"part-{len(self.parts)}"
        self._file = self._path.open("wb")
        self._written = 0
        return partial(self._write, header.name, self._file)

    def _write(self, name: str, file: BinaryIO, data: bytes) -> None:
        self._written += len(data)
        if self._written > self.limit:
            raise ServiceError(
                "payload-too-large",
                f"the form part {name!r} is over the limit of {self.limit} bytes per file"
                + self.hint,
            )
        file.write(data)

    def end_part(self, header: PartHeader, size: int) -> None:
        """Close the part's file and decide its media."""
        assert self._path is not None
        self.close()
        media = _media(header.content_type, self._path)
        self.parts[header.name] = Part(header.name, self._path, size, media, header.filename)

    def close(self) -> None:
        """Close the part being written, if any."""
        if self._file is not None:
            self._file.close()
            self._file = None


#: The most files a form carries (deserialize: document and weights; diff: old and new), each
#: up to the upload limit, and what the form's own headers and boundaries may add to them.
MAX_FORM_FILES = 2
_FORM_OVERHEAD = 1 << 20


@asynccontextmanager
async def receive(request: Request, settings: Settings, hint: str = "") -> AsyncIterator[Upload]:
    """The request's parts on disk, removed when the context ends, whatever happens; `hint` ends
    a payload-too-large detail (where else to turn). A request naming a held upload
    (``?upload=<sha256>``, `hold`) sends no body: that upload is its plain body."""
    held = request.query_params.get("upload")
    if held is not None:
        async with _held(settings, held) as upload:
            yield upload
        return
    media_type, options = content_type(request)
    accepted = _ZIP_TYPES | _JSON_TYPES | _OPAQUE_TYPES | {"multipart/form-data"}
    if media_type not in accepted or not media_type:
        raise ServiceError(
            "unsupported-media-type",
            "send application/zip, application/json or multipart/form-data, "
            f"not {media_type or 'nothing'!r}",
        )
    limit = settings.max_upload_bytes
    folder = Path(tempfile.mkdtemp(prefix="pt2serde-upload-"))
    try:
        if media_type == "multipart/form-data":
            files = _PartFiles(folder, limit, hint)
            try:
                splitter = FormSplitter(options.get(b"boundary"), files, settings.max_form_parts)
                form_limit = MAX_FORM_FILES * limit + _FORM_OVERHEAD
                idle = settings.body_idle_timeout_s
                await stream_body(request, form_limit, splitter.feed, idle, hint)
                splitter.finish()
            finally:
                files.close()
            yield Upload(files.parts)
        else:
            raw = folder / "body"
            size = await store_body(request, raw, settings, hint)
            yield Upload({"body": Part("body", raw, size, _media(media_type, raw))})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- held uploads

_DIGEST = re.compile(r"[0-9a-f]{64}")


def held_folder(settings: Settings) -> Path:
    """Where held uploads are kept (shared by the HTTP processes of one data directory)."""
    return settings.data_dir / "uploads"


def hold(settings: Settings, part: Part) -> str:
    """Keep a received part for later requests, named by the sha256 of its bytes (which only
    who has the bytes can know): the name a request gives as ``?upload=``. Held uploads are
    removed `held_upload_s` after their last use, and the least recently used past
    `held_uploads_bytes`; they are only ever read as a request's body is, never run."""
    digest = hashlib.sha256()
    with part.path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    name = digest.hexdigest()
    folder = held_folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(part.path, folder / name)
    except OSError:
        # another file system: copied beside it first, so no reader sees half of it
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
        with os.fdopen(fd, "wb") as out, part.path.open("rb") as file:
            shutil.copyfileobj(file, out, 1 << 20)
        os.replace(temporary, folder / name)
    _sweep(folder, settings, keep=name)
    return name


def _sweep(folder: Path, settings: Settings, keep: str) -> None:
    """Remove expired held uploads, then the least recently used past the byte budget."""
    now = time.time()
    held: list[tuple[float, int, Path]] = []
    for path in folder.iterdir():
        if not _DIGEST.fullmatch(path.name):
            continue
        with contextlib.suppress(FileNotFoundError):
            found = path.stat()
            if path.name != keep and now - found.st_mtime > settings.held_upload_s:
                path.unlink(missing_ok=True)
            else:
                held.append((found.st_mtime, found.st_size, path))
    total = sum(size for _, size, _ in held)
    for _, size, path in sorted(held):
        if total <= settings.held_uploads_bytes or path.name == keep:
            continue
        path.unlink(missing_ok=True)
        total -= size


@asynccontextmanager
async def _held(settings: Settings, name: str) -> AsyncIterator[Upload]:
    """The held upload `name` as a request's plain body (a link to it in a folder of the
    request's own, removed when the context ends); upload-not-found when there is none."""
    source = held_folder(settings) / name
    folder = Path(tempfile.mkdtemp(prefix="pt2serde-upload-"))
    try:
        raw = folder / "body"
        try:
            if not _DIGEST.fullmatch(name):
                raise FileNotFoundError(name)
            # a use keeps it another while
            os.utime(source)
            _link_or_copy(source, raw)
        except FileNotFoundError:
            raise ServiceError(
                "upload-not-found", f"no held upload {name[:64]!r}: send it (POST /v1/uploads)"
            ) from None
        size = raw.stat().st_size
        yield Upload({"body": Part("body", raw, size, _media("", raw))})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    """`source` at `target` too: a hard link (a sweep removing the held file leaves the
    request's), or a copy across file systems."""
    try:
        os.link(source, target)
    except OSError as failed:
        if isinstance(failed, FileNotFoundError):
            raise
        shutil.copyfile(source, target)
