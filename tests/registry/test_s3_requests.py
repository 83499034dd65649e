"""The S3 backend's own requests: their signature against botocore's, and their round trips
(signed, ranged, retried on a connection the store dropped) against the session's SeaweedFS,
which refuses unsigned requests."""

from __future__ import annotations

import datetime
import gc
import hashlib
import socket
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from app.registry.blobs.base import Piece
from app.registry.blobs.s3 import S3Objects, SigV4
from tests.registry.seaweed import Seaweed

_NOW = datetime.datetime(2026, 11, 24, 5, 30, 7, tzinfo=datetime.UTC)
_HOST = "127.0.0.1:9123"


def _botocore(
    credentials: Credentials, method: str, path: str, headers: dict[str, str], body: bytes
) -> str:
    request = AWSRequest(method=method, url=f"http://{_HOST}{path}", headers=headers, data=body)
    S3SigV4Auth(credentials, "s3", "eu-west-3").add_auth(request)
    return str(request.headers["Authorization"])


@pytest.mark.parametrize("token", [None, "a-session-token"])
@pytest.mark.parametrize(
    ("method", "path", "headers", "body"),
    [
        ("GET", "/bucket/some/prefix/ab/" + "ab" * 32, {}, b""),
        ("GET", "/bucket/ab/" + "ab" * 32, {"Range": "bytes=1000-"}, b""),
        ("HEAD", "/bucket/p%20q/%C3%A9t%C3%A9~x/cd/" + "cd" * 32, {}, b""),
        ("PUT", "/bucket/p/ef/" + "ef" * 32, {"Content-Length": "11"}, b"hello bytes"),
        # a part: the query's parameters are signed sorted, as sent (encoded)
        ("PUT", "/b/k?uploadId=a%2Fb%3D%3D_-.~x&partNumber=12", {"Content-Length": "2"}, b"ab"),
    ],
)
def test_signature_is_botocores(
    monkeypatch: pytest.MonkeyPatch,
    token: str | None,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: _NOW.replace(tzinfo=None))
    expected = _botocore(credentials, method, path, headers, body)
    ours = SigV4(credentials, "eu-west-3", _HOST)
    payload = hashlib.sha256(body).hexdigest()
    signed = ours.sign(method, path, headers, payload, _NOW.timestamp())
    assert signed["Authorization"] == expected
    assert signed["Host"] == _HOST
    assert signed.get("X-Amz-Security-Token") == token
    # the day's key is kept, and a new day derives its own
    later = ours.sign(method, path, headers, payload, _NOW.timestamp() + 86400)
    monkeypatch.setattr(
        "botocore.auth.get_current_datetime",
        lambda: (_NOW + datetime.timedelta(days=1)).replace(tzinfo=None),
    )
    assert later["Authorization"] == _botocore(credentials, method, path, headers, body)


def test_requests_round_trip(seaweed: Seaweed, tmp_path: Path) -> None:
    objects = S3Objects("requests", "signed/p q")
    data = bytes(range(256)) * 4099
    source = tmp_path / "data"
    source.write_bytes(b"head" + data + b"tail")
    digest = hashlib.sha256(data).hexdigest()
    assert not objects.exists(digest)
    with pytest.raises(FileNotFoundError):
        objects.open(digest)
    objects.put(Piece(source, 4, len(data)), digest)
    assert objects.exists(digest)
    assert [(o.digest, o.size) for o in objects.listing()] == [(digest, len(data))]
    with objects.open(digest) as handle:
        assert handle.read() == data
        handle.seek(777_777)
        assert handle.read(5000) == data[777_777:782_777]
        handle.seek(10)
        assert handle.read(20) == data[10:30]
    # the store refuses what is not signed
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{seaweed.endpoint}/requests/{quote(objects.key(digest))}")
    assert refused.value.code == 403
    refused.value.close()
    objects.remove(digest)
    assert not objects.exists(digest)
    # every socket was closed, none left to the garbage collector
    del objects, handle
    gc.collect()


def test_parts_of_a_large_object(seaweed: Seaweed, tmp_path: Path) -> None:
    objects = S3Objects("requests", "parts", part_bytes=5 * 1024 * 1024)
    source = tmp_path / "data"
    data = hashlib.sha256(b"seed").digest() * (11 * 1024 * 1024 // 32 + 7)
    source.write_bytes(b"before" + data)
    digest = hashlib.sha256(data).hexdigest()
    # three parts (5, 5 and 1 MiB and a bit), from a span of the file
    objects.put(Piece(source, 6, len(data)), digest)
    with objects.open(digest) as handle:
        assert handle.read() == data
    assert objects.unfinished() == []
    # a failed part aborts its upload: nothing is left half-written
    short = Piece(source, 6, len(data) + 100)
    with pytest.raises(OSError, match="ends before byte"):
        objects.put(short, "00" * 32)
    assert objects.unfinished() == []
    assert not objects.exists("00" * 32)


def test_a_dropped_connection_is_tried_again(seaweed: Seaweed, tmp_path: Path) -> None:
    objects = S3Objects("requests", "dropped")
    source = tmp_path / "data"
    source.write_bytes(b"x" * 70_000)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    objects.put(Piece.whole(source), digest)
    idle = objects._store._idle
    assert idle
    # as a store closing idle connections does: the next request on them fails at once
    for connection in idle:
        assert connection.sock is not None
        connection.sock.shutdown(socket.SHUT_RDWR)
    with objects.open(digest) as handle:
        assert handle.read() == source.read_bytes()
    assert objects.exists(digest)
    # the dropped connections' sockets were closed, none left to the garbage collector
    del idle, objects, handle
    gc.collect()
