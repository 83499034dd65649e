"""Safetensors I/O without torch, checked against the safetensors library's torch API."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import orjson
import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from app.archive.raw import RawTensor
from app.bridge.exported import SerializedProgram, deserialize, storage_bytes, tensor_meta
from app.failure import BridgeFailure
from app.tensors.safetensors_io import (
    StoredTensor,
    from_safetensors,
    safetensors_names,
    to_safetensors,
    write_safetensors,
)
from schema import Issue, ScalarType
from tests.zoo import ZooProgram, outputs_close


def _raw(name: str, tensor: torch.Tensor, kind: str = "buffer") -> RawTensor:
    return RawTensor(name, kind, tensor_meta(tensor), storage_bytes(tensor))  # type: ignore[arg-type]


def _file(header: Mapping[str, object], body: bytes = b"") -> bytes:
    head = orjson.dumps(header)
    return struct.pack("<Q", len(head)) + head + body


def _issues(data: bytes) -> list[Issue]:
    with pytest.raises(BridgeFailure) as caught:
        from_safetensors(data)
    assert caught.value.code == "safetensors-invalid"
    return caught.value.issues


def test_dtypes_program_round_trips_and_still_runs(
    zoo: dict[str, ZooProgram], serialized: dict[str, SerializedProgram]
) -> None:
    program = serialized["dtypes"]
    data = to_safetensors(program.tensors.values())
    by_library = st_load(data)
    state = zoo["dtypes"].ep.state_dict
    assert {t.dtype for t in by_library.values()} == {
        torch.bfloat16,
        torch.int8,
        torch.bool,
        torch.complex64,
    }
    assert set(by_library) == set(state)
    assert all(torch.equal(by_library[k], state[k].detach()) for k in state)
    back = from_safetensors(data)
    assert {k: (t.kind, t.meta.requires_grad) for k, t in back.items()} == {
        "weight": ("parameter", True),
        "codes": ("buffer", False),
        "mask": ("buffer", False),
        "phase": ("buffer", False),
    }
    built = deserialize(program.doc, back)
    program_zoo = zoo["dtypes"]
    assert outputs_close(built.module()(*program_zoo.args), program_zoo.run())


def test_constants_keep_their_kind(serialized: dict[str, SerializedProgram]) -> None:
    back = from_safetensors(to_safetensors(serialized["constants"].tensors.values()))
    assert {k: t.kind for k, t in back.items()} == {"table": "constant", "offset": "constant"}
    assert {k: t.data for k, t in back.items()} == {
        k: t.data for k, t in serialized["constants"].tensors.items()
    }


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
        torch.arange(24, dtype=torch.bfloat16).reshape(6, 4)[1:4, ::2],
        torch.randn(4, 3, dtype=torch.complex64)[:, 1],
        torch.arange(10, dtype=torch.int8)[3:7],
        torch.zeros(0, 3),
        torch.tensor(7, dtype=torch.int64),
    ],
    ids=["transposed", "bf16-window", "complex-column", "int8-offset", "empty", "scalar"],
)
def test_views_are_written_contiguous(tensor: torch.Tensor) -> None:
    raw = _raw("t", tensor)
    data = to_safetensors([raw])
    assert torch.equal(st_load(data)["t"], tensor)
    back = from_safetensors(data)["t"]
    assert back.data == storage_bytes(tensor.contiguous().clone())
    assert back.meta.dtype == raw.meta.dtype
    assert back.meta.sizes == raw.meta.sizes
    assert back.meta.storage_offset.value == 0


def test_library_files_are_read_with_default_or_given_kinds() -> None:
    tensors = {
        "w": torch.randn(2, 3, dtype=torch.float16),
        "f8": torch.randn(4).to(torch.float8_e4m3fn),
        "u": torch.arange(3).to(torch.uint16),
    }
    data = st_save(tensors, metadata={"format": "pt"})
    back = from_safetensors(data, {"u": "constant"}, default_kind="buffer")
    assert {k: (t.kind, t.meta.requires_grad) for k, t in back.items()} == {
        "w": ("buffer", False),
        "f8": ("buffer", False),
        "u": ("constant", False),
    }
    assert {k: t.meta.dtype for k, t in back.items()} == {
        "w": ScalarType.HALF,
        "f8": ScalarType.FLOAT8E4M3FN,
        "u": ScalarType.UINT16,
    }
    assert all(back[k].data == storage_bytes(t) for k, t in tensors.items())
    assert from_safetensors(data)["w"].kind == "parameter"


def test_metadata_is_kept_beside_ours() -> None:
    data = to_safetensors([_raw("x", torch.ones(2), "parameter")], {"format": "pt"})
    (size,) = struct.unpack_from("<Q", data)
    header = orjson.loads(data[8 : 8 + size])
    assert header["__metadata__"] == {
        "format": "pt",
        "pt2serde.kinds": '{"x":"parameter"}',
        "pt2serde.requires_grad": "[]",
    }
    assert (8 + size) % 8 == 0


def test_unsupported_dtype_is_refused() -> None:
    raw = _raw("z", torch.ones(2, dtype=torch.complex128))
    with pytest.raises(BridgeFailure) as caught:
        to_safetensors([raw])
    assert caught.value.code == "safetensors-unsupported-dtype"
    assert caught.value.issues == [Issue("safetensors-unsupported-dtype", "/z", "complex128")]
    f4 = _file({"q": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, b"\x00")
    with pytest.raises(BridgeFailure) as caught:
        from_safetensors(f4)
    assert caught.value.code == "safetensors-unsupported-dtype"


def test_duplicate_names_are_refused() -> None:
    raw = _raw("x", torch.ones(2))
    with pytest.raises(BridgeFailure) as caught:
        to_safetensors([raw, raw])
    assert caught.value.code == "tensors-duplicate-name"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01\x00", "2 bytes is too short for a header"),
        (struct.pack("<Q", 1000) + b"{}", "header length 1000 does not fit in 10 bytes"),
        (struct.pack("<Q", 3) + b"{x}", "header is not JSON"),
        (struct.pack("<Q", 2) + b"[]", "header is not a JSON object"),
    ],
)
def test_unreadable_headers(data: bytes, message: str) -> None:
    with pytest.raises(BridgeFailure) as caught:
        from_safetensors(data)
    assert caught.value.code == "safetensors-invalid"
    assert message in caught.value.message


def test_bad_entries_are_all_listed() -> None:
    header = {
        "__metadata__": {"pt2serde.kinds": '{"a": "weight"}'},
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F99", "shape": [1], "data_offsets": [8, 12]},
        "c": {"dtype": "F32", "shape": [-1], "data_offsets": [12, 8]},
        "d": "nope",
        "e": {"dtype": "I64", "shape": [2], "data_offsets": [8, 12], "extra": 1},
        "f": {"dtype": "F32", "shape": [3], "data_offsets": [8, 16]},
    }
    assert _issues(_file(header, bytes(16))) == [
        Issue(
            "safetensors-bad-metadata",
            "/__metadata__/pt2serde.kinds",
            "must be a JSON object of kinds (buffer, constant, parameter)",
        ),
        Issue("safetensors-bad-dtype", "/b/dtype", "unknown dtype 'F99'"),
        Issue("safetensors-bad-shape", "/c/shape", "must be a list of ints >= 0"),
        Issue(
            "safetensors-bad-offsets", "/c/data_offsets", "must be [begin, end] with begin <= end"
        ),
        Issue("safetensors-bad-entry", "/d", "must be an object"),
        Issue("safetensors-bad-entry", "/e", "unknown keys: extra"),
        Issue("safetensors-bad-offsets", "/f/data_offsets", "8 bytes for 3 F32 elements"),
    ]


def test_holes_overlaps_and_trailing_bytes() -> None:
    overlap = {
        "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
    }
    assert _issues(_file(overlap, bytes(6))) == [
        Issue(
            "safetensors-bad-offsets",
            "/b/data_offsets",
            "starts at byte 2; the data must be packed, expected 4",
        )
    ]
    hole = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}
    assert _issues(_file(hole, bytes(6))) == [
        Issue(
            "safetensors-bad-offsets",
            "/a/data_offsets",
            "starts at byte 2; the data must be packed, expected 0",
        )
    ]
    short = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}
    assert _issues(_file(short, bytes(3))) == [
        Issue("safetensors-bad-offsets", "", "the tensors cover 4 bytes of a 3-byte data section")
    ]
    assert _issues(_file(short, bytes(5))) == [
        Issue("safetensors-bad-offsets", "", "the tensors cover 4 bytes of a 5-byte data section")
    ]


def test_kinds_for_missing_tensors_are_refused() -> None:
    data = to_safetensors([_raw("x", torch.ones(2))])
    with pytest.raises(BridgeFailure) as caught:
        from_safetensors(data, {"y": "buffer"})
    assert caught.value.issues == [
        Issue("safetensors-unknown-tensor", "/y", "a kind was given for no tensor")
    ]


def _blocks(data: bytes, size: int, reads: list[str], name: str) -> Iterator[bytes]:
    reads.append(name)
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _streamed(raw: RawTensor, reads: list[str]) -> StoredTensor:
    return StoredTensor(
        raw.name, raw.kind, raw.meta, len(raw.data), lambda: _blocks(raw.data, 5, reads, raw.name)
    )


def test_streamed_writing_is_what_the_library_reads(
    serialized: dict[str, SerializedProgram],
) -> None:
    tensors = [
        *serialized["dtypes"].tensors.values(),
        _raw("transposed", torch.arange(12, dtype=torch.float32).reshape(3, 4).t()),
        _raw("window", torch.arange(10, dtype=torch.int8)[3:7]),
    ]
    reads: list[str] = []
    out = io.BytesIO()
    write_safetensors(out, [_streamed(t, reads) for t in tensors], {"format": "pt"})
    assert out.getvalue() == to_safetensors(tensors, {"format": "pt"})
    # each storage is read once, when its turn comes in the file's order
    assert sorted(reads) == sorted(t.name for t in tensors)
    (size,) = struct.unpack_from("<Q", out.getvalue())
    header = orjson.loads(out.getvalue()[8 : 8 + size])
    del header["__metadata__"]
    assert sorted(header, key=lambda n: header[n]["data_offsets"]) == reads
    assert torch.equal(st_load(out.getvalue())["window"], torch.arange(3, 7, dtype=torch.int8))


def test_a_stream_of_the_wrong_length_is_refused() -> None:
    raw = _raw("x", torch.ones(4))
    short = StoredTensor("x", "buffer", raw.meta, len(raw.data), lambda: (raw.data[:-4],))
    with pytest.raises(BridgeFailure) as caught:
        write_safetensors(io.BytesIO(), [short])
    assert (caught.value.code, caught.value.message) == (
        "tensor-data-invalid",
        "'x' gave 12 bytes of storage, not the 16 it declares",
    )


def test_sizes_are_checked_before_any_byte_is_read() -> None:
    raw = _raw("x", torch.ones(4))
    unread = StoredTensor("x", "buffer", raw.meta, 8, lambda: pytest.fail("read"))
    with pytest.raises(BridgeFailure) as caught:
        write_safetensors(io.BytesIO(), [unread])
    assert caught.value.code == "tensor-data-invalid"
    assert [i.code for i in caught.value.issues] == ["tensor-data-short"]


def test_names_come_from_the_header_alone(tmp_path: Path) -> None:
    data = st_save({"b": torch.ones(2), "a": torch.zeros(3)}, metadata={"format": "pt"})
    path = tmp_path / "w.safetensors"
    path.write_bytes(data)
    assert sorted(safetensors_names(data)) == sorted(safetensors_names(path)) == ["a", "b"]
    path.write_bytes(data[:12])
    with pytest.raises(BridgeFailure) as caught:
        safetensors_names(path)
    assert caught.value.code == "safetensors-invalid"
