"""Request bodies streamed to temporary files with the size cap checked while reading.

A body is a `.pt2` (application/zip), a JSON document (application/json), or a multipart form
whose parts are either. Temporary files are removed when the request ends, whatever happens.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from fastapi import Request
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect

from app.api.problems import ServiceError
from app.settings import Settings

Media = Literal["zip", "json", "safetensors", "yaml"]
_ZIP_TYPES = {"application/zip", "application/x-zip-compressed"}
#: declared types that say nothing about the content: the first bytes decide.
_OPAQUE_TYPES = {"", "application/octet-stream"}
_JSON_TYPES = {"application/json"}
_YAML_TYPES = {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}
_CHUNK = 1 << 20


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


async def _spool(request: Request, target: Path, limit: int) -> int:
    size = 0
    with target.open("wb") as out:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ServiceError(
                        "payload-too-large", f"the body is over the limit of {limit} bytes"
                    )
                out.write(chunk)
        except ClientDisconnect:
            raise ServiceError("bad-request", "the client disconnected mid-upload") from None
    if size == 0:
        raise ServiceError("bad-request", "the request body is empty")
    return size


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


class _FormSplitter:
    """python-multipart callbacks that write each form part to its own file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.parts: list[Part] = []
        self._field = b""
        self._value = b""
        self._headers: dict[bytes, bytes] = {}
        self._name = ""
        self._filename = ""
        self._type = ""
        self._path: Path | None = None
        self._file: BinaryIO | None = None
        self._size = 0

    def on_part_begin(self) -> None:
        self._headers = {}

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._field.lower()] = self._value
        self._field, self._value = b"", b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        if not self._name:
            raise ServiceError("bad-multipart", "a form part has no name")
        self._filename = options.get(b"filename", b"").decode("utf-8", "replace")
        self._type = parse_options_header(self._headers.get(b"content-type", b""))[0].decode()
        self._path = self.folder / f"part-{len(self.parts)}"
        self._file = self._path.open("wb")
        self._size = 0

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        assert self._file is not None
        self._file.write(data[start:end])
        self._size += end - start

    def on_part_end(self) -> None:
        assert self._path is not None
        self.close()
        if self._size == 0:
            raise ServiceError("bad-request", f"the form part {self._name!r} is empty")
        media = _media(self._type, self._path)
        self.parts.append(Part(self._name, self._path, self._size, media, self._filename))

    def close(self) -> None:
        """Close the part being written, if any."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _split_multipart(source: Path, boundary: bytes, folder: Path) -> list[Part]:
    splitter = _FormSplitter(folder)
    callbacks = {
        name: getattr(splitter, name)
        for name in (
            "on_part_begin",
            "on_header_field",
            "on_header_value",
            "on_header_end",
            "on_headers_finished",
            "on_part_data",
            "on_part_end",
        )
    }
    parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]
    try:
        with source.open("rb") as f:
            while chunk := f.read(_CHUNK):
                parser.write(chunk)
        parser.finalize()
    except ServiceError:
        raise
    except Exception as exc:  # python-multipart raises several error types for bad bodies
        raise ServiceError("bad-multipart", f"the multipart body cannot be read: {exc}") from None
    finally:
        splitter.close()
    if not splitter.parts:
        raise ServiceError("bad-multipart", "the multipart body has no parts")
    return splitter.parts


@asynccontextmanager
async def receive(request: Request, settings: Settings) -> AsyncIterator[Upload]:
    """The request's parts on disk, removed when the context ends, whatever happens."""
    declared, options = parse_options_header(request.headers.get("content-type", ""))
    media_type = declared.decode().lower()
    accepted = _ZIP_TYPES | _JSON_TYPES | _OPAQUE_TYPES | {"multipart/form-data"}
    if media_type not in accepted or not media_type:
        raise ServiceError(
            "unsupported-media-type",
            "send application/zip, application/json or multipart/form-data, "
            f"not {media_type or 'nothing'!r}",
        )
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > settings.max_upload_bytes:
        raise ServiceError(
            "payload-too-large", f"the body is over the limit of {settings.max_upload_bytes} bytes"
        )
    folder = Path(tempfile.mkdtemp(prefix="pt2serde-upload-"))
    try:
        raw = folder / "body"
        size = await _spool(request, raw, settings.max_upload_bytes)
        upload = Upload()
        if media_type == "multipart/form-data":
            boundary = options.get(b"boundary")
            if not boundary:
                raise ServiceError("bad-multipart", "the multipart body has no boundary")
            for part in _split_multipart(raw, boundary, folder):
                if part.name in upload.parts:
                    raise ServiceError("bad-multipart", f"the form field {part.name!r} is repeated")
                upload.parts[part.name] = part
            raw.unlink()
        else:
            upload.parts["body"] = Part("body", raw, size, _media(media_type, raw))
        yield upload
    finally:
        shutil.rmtree(folder, ignore_errors=True)
