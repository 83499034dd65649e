"""The .pt2 layout: allowlist, markers, configs, tensor bounds, pickle detection, multi-model."""

from __future__ import annotations

import io
import pickle
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import torch
from torch.export.pt2_archive._package import package_pt2
from torch.testing._internal.two_tensor import TwoTensor

from app.archive import ArchiveFailure, ZipReader, manifest, open_archive
from app.settings import Limits
from schema import Issue
from tests.archive.zipcraft import FIXED_TIME, build, rezip, stored
from tests.zoo import ZooProgram, archive_bytes

WEIGHTS_CONFIG = "archive/data/weights/model_weights_config.json"
CONSTANTS_CONFIG = "archive/data/constants/model_constants_config.json"
MiB = 1024 * 1024


def refused(code: str, action: Callable[[], object]) -> ArchiveFailure:
    """Run `action`, which must raise ArchiveFailure with exactly `code`."""
    with pytest.raises(ArchiveFailure) as failure:
        action()
    assert failure.value.code == code, str(failure.value)
    return failure.value


def config_of(archive: bytes, member: str = WEIGHTS_CONFIG) -> dict[str, Any]:
    """A payload config of a torch-written archive, as plain JSON."""
    with ZipReader(archive) as reader:
        config: dict[str, Any] = orjson.loads(reader.read_member(member, MiB))
    return config


class Pickled(torch.nn.Module):
    """A tensor-subclass parameter (torch pickles it) next to tied linear weights."""

    def __init__(self) -> None:
        super().__init__()
        pair = TwoTensor(torch.randn(3), torch.randn(3))  # type: ignore[no-untyped-call]
        self.w = torch.nn.Parameter(pair)
        self.tied = torch.nn.Linear(3, 3)
        self.tied2 = self.tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.w + self.tied(x) + self.tied2(x)
        return out


@pytest.fixture(scope="module")
def pickled_archive() -> bytes:
    """torch.export.save's archive of `Pickled`."""
    torch.manual_seed(0)
    ep = torch.export.export(Pickled(), (torch.randn(3),), strict=False)
    return archive_bytes(ep)


# -- the allowlist ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "archive/evil.txt",
        "archive/models/sub/model.json",
        "archive/data/weights/weight_x",
        "archive/data/weights/weight_01",
        "archive/data/constants/weight_0",
        "archive/data/weights/model_model_param_config.json",
        "archive/data/executorch/program.pte",
        "archive/xl_model_weights/model_param_config",
        "archive/.data/other",
        "archive/unknown/",
    ],
)
def test_unexpected_member(name: str, zoo_archives: dict[str, bytes]) -> None:
    data = rezip(zoo_archives["conv"], add={name: b""})
    failure = refused("archive-unexpected-member", lambda: open_archive(data))
    assert failure.message == f"member {name} is not part of the .pt2 layout"


@pytest.mark.parametrize(
    "name",
    [
        "archive/data/aotinductor/model.so",
        "archive/data/aotinductor/model/model.wrapper.cpp",
        "archive/extra/libhelper.so.1",
        "archive/data/weights/kernel.dylib",
        "elsewhere/evil.so",
    ],
)
def test_native_code(name: str, zoo_archives: dict[str, bytes]) -> None:
    data = rezip(zoo_archives["conv"], add={name: b"\x7fELF"})
    failure = refused("archive-native-code", lambda: open_archive(data))
    assert name in failure.message


def test_legacy_top_level_layout() -> None:
    """torch's first archive format: files at the zip root, pickled state dict and constants."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in (
            "serialized_exported_program.json",
            "serialized_state_dict.pt",
            "serialized_constants.pt",
            "serialized_example_inputs.pt",
            "version",
        ):
            target.writestr(zipfile.ZipInfo(name, FIXED_TIME), b"{}")
    failure = refused("archive-legacy-layout", lambda: open_archive(out.getvalue()))
    assert "pre-2.8" in failure.message


def test_legacy_pickled_weights(zoo_archives: dict[str, bytes]) -> None:
    data = rezip(
        zoo_archives["conv"],
        add={"archive/data/weights/model.pt": b"PK\x03\x04"},
    )
    failure = refused("archive-legacy-layout", lambda: open_archive(data))
    assert failure.message.startswith("member archive/data/weights/model.pt belongs to torch's")


def test_directory_entries_of_the_layout_are_fine(zoo_archives: dict[str, bytes]) -> None:
    data = rezip(zoo_archives["conv"], add={"archive/": b"", "archive/data/weights/": b""})
    with open_archive(data) as archive:
        assert sorted(archive.tensors) == ["conv.bias", "conv.weight", "fc.bias", "fc.weight"]


def test_orphan_members(zoo_archives: dict[str, bytes]) -> None:
    data = rezip(zoo_archives["conv"], add={"archive/data/weights/weight_99": b"\0" * 4})
    failure = refused("archive-unexpected-member", lambda: open_archive(data))
    assert "weight_99 is not referenced by any config" in failure.message
    data = rezip(
        zoo_archives["conv"], add={"archive/data/weights/other_weights_config.json": b"{}"}
    )
    refused("archive-unexpected-member", lambda: open_archive(data))


# -- markers and required members -------------------------------------------------------------


@pytest.mark.parametrize(
    ("marker", "value"),
    [
        ("archive/byteorder", b"big"),
        ("archive/archive_version", b"1"),
        ("archive/archive_format", b"pt3"),
        ("archive/.data/version", b"six"),
        ("archive/.data/serialization_id", b"0" * 65),
        ("archive/byteorder", b"little" * 20),
    ],
)
def test_bad_markers(marker: str, value: bytes, zoo_archives: dict[str, bytes]) -> None:
    data = rezip(zoo_archives["conv"], replace={marker: value})
    failure = refused("archive-bad-marker", lambda: open_archive(data))
    assert failure.message.startswith(f"member {marker} is ")


def test_optional_markers_may_be_absent(zoo_archives: dict[str, bytes]) -> None:
    drop = {"archive/byteorder", "archive/.data/version", "archive/.data/serialization_id"}
    with open_archive(rezip(zoo_archives["conv"], drop=drop)) as archive:
        assert len(archive.tensors) == 4


def test_not_pt2(zoo_archives: dict[str, bytes]) -> None:
    data = rezip(zoo_archives["conv"], drop={"archive/archive_format"})
    refused("archive-not-pt2", lambda: open_archive(data))
    other = build([stored("project/README.md", b"# hello"), stored("project/setup.py", b"")])
    failure = refused("archive-not-pt2", lambda: open_archive(other))
    assert failure.message == "no project/archive_format member: not a .pt2 archive"


@pytest.mark.parametrize(
    "member",
    [
        "archive/archive_version",
        "archive/models/model.json",
        WEIGHTS_CONFIG,
        CONSTANTS_CONFIG,
        "archive/data/sample_inputs/model.pt",
        "archive/data/weights/weight_0",
    ],
)
def test_missing_members(member: str, zoo_archives: dict[str, bytes]) -> None:
    data = rezip(zoo_archives["conv"], drop={member})
    refused("archive-missing-member", lambda: open_archive(data))


# -- JSON members and configs -----------------------------------------------------------------


def test_json_too_large(zoo_archives: dict[str, bytes]) -> None:
    data = zoo_archives["linear_bn_train"]
    refused("archive-json-too-large", lambda: open_archive(data, Limits(max_json_bytes=1000)))


@pytest.mark.parametrize(
    ("config", "issues"),
    [
        (b"[", [("invalid-json", "")]),
        (b'{"config": []}', [("wrong-type", "/config")]),
        (
            b'{"config": {"w": {"path_name": 3, "is_param": true, "use_pickle": false}}}',
            [("wrong-type", "/config/w/path_name"), ("missing-field", "/config/w/tensor_meta")],
        ),
    ],
)
def test_bad_config(
    config: bytes, issues: list[tuple[str, str]], zoo_archives: dict[str, bytes]
) -> None:
    data = rezip(zoo_archives["conv"], replace={WEIGHTS_CONFIG: config})
    failure = refused("archive-bad-config", lambda: open_archive(data))
    assert [(i.code, i.path) for i in failure.issues] == issues
    assert failure.message.startswith(f"member {WEIGHTS_CONFIG}: ")


@pytest.mark.parametrize(
    ("path_name", "member"),
    [
        ("../../../etc/passwd", WEIGHTS_CONFIG),
        ("model_weights_config.json", WEIGHTS_CONFIG),
        ("custom_obj_0", WEIGHTS_CONFIG),
        ("weight_0", CONSTANTS_CONFIG),
    ],
)
def test_config_path_names(path_name: str, member: str, zoo_archives: dict[str, bytes]) -> None:
    source = zoo_archives["constants"] if member == CONSTANTS_CONFIG else zoo_archives["conv"]
    config = config_of(source, member)
    fqn = next(iter(config["config"]))
    config["config"][fqn]["path_name"] = path_name
    data = rezip(source, replace={member: orjson.dumps(config)})
    failure = refused("archive-bad-config", lambda: open_archive(data))
    assert [(i.code, i.path) for i in failure.issues] == [
        ("bad-path-name", f"/config/{fqn}/path_name")
    ]


def test_raw_tensor_needs_meta(zoo_archives: dict[str, bytes]) -> None:
    config = config_of(zoo_archives["conv"])
    config["config"]["conv.weight"]["tensor_meta"] = None
    data = rezip(zoo_archives["conv"], replace={WEIGHTS_CONFIG: orjson.dumps(config)})
    failure = refused("archive-bad-config", lambda: open_archive(data))
    assert failure.issues == [
        Issue(
            "missing-tensor-meta",
            "/config/conv.weight/tensor_meta",
            "a raw (use_pickle false) tensor needs its tensor_meta",
        )
    ]


def test_shared_member_must_agree_on_dtype(zoo_archives: dict[str, bytes]) -> None:
    config = config_of(zoo_archives["conv"])
    config["config"]["fc.bias"]["path_name"] = config["config"]["conv.bias"]["path_name"]
    config["config"]["fc.bias"]["tensor_meta"]["dtype"] = 5  # int64 over float32 bytes
    config["config"]["fc.bias"]["tensor_meta"]["sizes"] = [{"as_int": 1}]
    data = rezip(
        zoo_archives["conv"],
        replace={WEIGHTS_CONFIG: orjson.dumps(config)},
        drop={"archive/data/weights/weight_3"},
    )
    failure = refused("archive-bad-config", lambda: open_archive(data))
    assert [i.code for i in failure.issues] == ["inconsistent-payload"]


# -- tensor bounds ----------------------------------------------------------------------------


def meta_edit(
    zoo_archives: dict[str, bytes], edit: Callable[[dict[str, Any]], None], **replace: bytes
) -> bytes:
    """conv's archive with conv.weight's tensor_meta edited (and members replaced)."""
    config = config_of(zoo_archives["conv"])
    edit(config["config"]["conv.weight"]["tensor_meta"])
    replacements = {WEIGHTS_CONFIG: orjson.dumps(config)}
    replacements.update({f"archive/data/weights/{k}": v for k, v in replace.items()})
    return rezip(zoo_archives["conv"], replace=replacements)


def test_huge_meta_over_empty_member_refused_before_reading(
    zoo_archives: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def huge(meta: dict[str, Any]) -> None:
        meta["sizes"] = [{"as_int": 2**28}]
        meta["strides"] = [{"as_int": 1}]

    data = meta_edit(zoo_archives, huge, weight_0=b"")
    streamed: list[str] = []
    original = ZipReader._stream

    def spy(self: ZipReader, member: Any, chunk: int) -> Iterator[bytes]:
        streamed.append(member.name)
        return original(self, member, chunk)

    monkeypatch.setattr(ZipReader, "_stream", spy)
    tracemalloc.start()
    try:
        failure = refused("archive-tensor-size-mismatch", lambda: open_archive(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert failure.message == (
        "tensor 'conv.weight' (archive/data/weights/weight_0): sizes [268435456], strides [1] "
        "and offset 0 need 1073741824 bytes of float32 storage; the member has 0"
    )
    assert "archive/data/weights/weight_0" not in streamed
    assert peak < 4 * MiB


@pytest.mark.parametrize(
    ("edit", "replace", "code"),
    [
        (
            lambda m: m.update(sizes=[{"as_int": -1}, {"as_int": 3}, {"as_int": 3}, {"as_int": 3}]),
            {},
            "archive-bad-tensor-meta",
        ),
        (lambda m: m.update(storage_offset={"as_int": -4}), {}, "archive-bad-tensor-meta"),
        (lambda m: m["strides"].__setitem__(0, {"as_int": -27}), {}, "archive-bad-tensor-meta"),
        (
            lambda m: m["sizes"].__setitem__(0, {"as_expr": {"expr_str": "s0", "hint": None}}),
            {},
            "archive-bad-tensor-meta",
        ),
        (lambda m: m["strides"].pop(), {}, "archive-bad-tensor-meta"),
        (lambda m: m.update(dtype=0), {}, "archive-bad-tensor-meta"),
        (lambda m: m.update(layout=1), {}, "archive-bad-tensor-meta"),
        (lambda m: m.update(storage_offset={"as_int": 1}), {}, "archive-tensor-size-mismatch"),
        (lambda m: m["strides"].__setitem__(0, {"as_int": 28}), {}, "archive-tensor-size-mismatch"),
        (lambda m: None, {"weight_0": b"\0" * 430}, "archive-tensor-size-mismatch"),
        (lambda m: m.update(dtype=11), {}, "archive-tensor-size-mismatch"),
    ],
    ids=[
        "negative-size",
        "negative-offset",
        "negative-stride",
        "symbolic-size",
        "rank-mismatch",
        "unknown-dtype",
        "sparse-layout",
        "offset-past-end",
        "stride-past-end",
        "not-whole-elements",
        "complex128-needs-more",
    ],
)
def test_tensor_meta_checks(
    edit: Callable[[dict[str, Any]], None],
    replace: dict[str, bytes],
    code: str,
    zoo_archives: dict[str, bytes],
) -> None:
    data = meta_edit(zoo_archives, edit, **replace)
    refused(code, lambda: open_archive(data))


def test_views_within_a_larger_member_are_fine(zoo_archives: dict[str, bytes]) -> None:
    def view(meta: dict[str, Any]) -> None:
        # conv.weight is [4, 3, 3, 3] over 108 floats: a transposed [3, 4] view at offset 96
        meta["sizes"] = [{"as_int": 3}, {"as_int": 4}]
        meta["strides"] = [{"as_int": 1}, {"as_int": 3}]
        meta["storage_offset"] = {"as_int": 96}

    with open_archive(meta_edit(zoo_archives, view)) as archive:
        entry = {e.name: e for e in manifest(archive)}["conv.weight"]
        assert (entry.shape, entry.strides, entry.storage_offset) == ([3, 4], [1, 3], 96)


def test_empty_tensor_fits_an_empty_member(zoo_archives: dict[str, bytes]) -> None:
    def empty(meta: dict[str, Any]) -> None:
        meta["sizes"][0] = {"as_int": 0}

    with open_archive(meta_edit(zoo_archives, empty, weight_0=b"")) as archive:
        assert archive.tensor("conv.weight").data == b""


def test_corrupt_weight_fails_on_read_not_open(zoo_archives: dict[str, bytes]) -> None:
    data = bytearray(zoo_archives["conv"])
    with ZipReader(bytes(data)) as reader:
        at = reader.members["archive/data/weights/weight_0"].data_offset
    data[at] ^= 0xFF
    with open_archive(bytes(data)) as archive:
        assert archive.tensor("conv.bias").data
        refused("archive-crc-mismatch", lambda: archive.tensor("conv.weight"))
        refused("archive-crc-mismatch", lambda: manifest(archive))
        refused("archive-missing-member", lambda: archive.tensor("nope"))


# -- pickles ----------------------------------------------------------------------------------


def test_pickled_payloads_are_listed_never_read(pickled_archive: bytes) -> None:
    with open_archive(pickled_archive) as archive:
        assert archive.pickled == [
            "archive/data/sample_inputs/model.pt",
            "archive/data/weights/weight_0",
        ]
        entry = archive.tensors["w"]
        assert (entry.kind, entry.use_pickle, entry.member) == (
            "parameter",
            True,
            "archive/data/weights/weight_0",
        )
        refused("archive-pickled-tensor", lambda: archive.tensor("w"))
        refused("archive-pickled-tensor", lambda: archive.iter_tensor("w"))
        entries = {e.name: e for e in manifest(archive)}
        assert entries["w"].pickled
        assert entries["w"].dtype == "float32"
        assert not entries["tied.weight"].pickled
        assert entries["tied.weight"].sha256 == entries["tied2.weight"].sha256
        raw = archive.raw_tensors()
        assert [t.name for t in raw] == ["tied.weight", "tied2.weight", "tied.bias", "tied2.bias"]
        assert raw[0].data is raw[1].data


def test_objects_and_pickled_extras(zoo_archives: dict[str, bytes]) -> None:
    config = config_of(zoo_archives["conv"], CONSTANTS_CONFIG)
    config["config"]["obj"] = {
        "path_name": "opaque_obj_0",
        "is_param": False,
        "use_pickle": True,
        "tensor_meta": None,
    }
    data = rezip(
        zoo_archives["conv"],
        replace={CONSTANTS_CONFIG: orjson.dumps(config)},
        add={
            "archive/data/constants/opaque_obj_0": pickle.dumps(object, protocol=2),
            "archive/extra/state.pkl": pickle.dumps({"a": 1}, protocol=4),
            "archive/extra/notes.txt": b"plain text",
        },
    )
    with open_archive(data) as archive:
        assert archive.objects == {"obj": "archive/data/constants/opaque_obj_0"}
        assert "obj" not in archive.tensors
        assert archive.extra == ["archive/extra/state.pkl", "archive/extra/notes.txt"]
        assert archive.pickled == [
            "archive/data/constants/opaque_obj_0",
            "archive/data/sample_inputs/model.pt",
            "archive/extra/state.pkl",
        ]


def test_raw_bytes_starting_like_a_pickle_are_not_pickles() -> None:
    class Codes(torch.nn.Module):
        codes: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("codes", torch.tensor([0x80, 2, 7, 9], dtype=torch.uint8))
            self.register_buffer("zipped", torch.tensor(list(b"PK\x03\x04"), dtype=torch.uint8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = x + self.codes
            return out

    ep = torch.export.export(Codes(), (torch.zeros(4, dtype=torch.uint8),), strict=False)
    with open_archive(archive_bytes(ep)) as archive:
        assert archive.tensor("codes").data == b"\x80\x02\x07\x09"
        # a stored raw member is a pickle only if it also ends with STOP; a zip header is one
        assert archive.pickled == [
            "archive/data/sample_inputs/model.pt",
            archive.tensors["zipped"].member,
        ]


# -- several models ---------------------------------------------------------------------------


def test_several_models(zoo: dict[str, ZooProgram]) -> None:
    out = io.BytesIO()
    package_pt2(
        out,
        exported_programs={"first": zoo["conv"].ep, "second": zoo["constants"].ep},
        extra_files={"notes.txt": "hello"},
    )
    with open_archive(out.getvalue()) as archive:
        assert list(archive.documents) == ["first", "second"]
        assert list(archive.tensors) == [
            "first/conv.weight",
            "first/conv.bias",
            "first/fc.weight",
            "first/fc.bias",
            "second/table",
            "second/offset",
        ]
        assert archive.tensors["second/table"].kind == "constant"
        assert archive.tensors["second/table"].model == "second"
        assert archive.extra == ["archive/extra/notes.txt"]
        assert archive.opaque_members(MiB)["extra/notes.txt"] == b"hello"
