"""The .pt2 layout torch 2.13's `torch.export.save` writes, read without torch and never unpickled.

Every member of `<root>/` must match the allowlist below, exactly:

    archive_format                            b"pt2" (required)
    archive_version                           b"0" (required)
    byteorder                                 b"little"
    .data/version                             decimal digits and a newline (the zip writer's)
    .data/serialization_id                    decimal digits
    models/<model>.json                       the document of each model
    data/weights/<model>_weights_config.json  PayloadConfig: parameters and buffers
    data/weights/weight_<n>                   raw storage bytes (or a torch.save pickle)
    data/constants/<model>_constants_config.json  PayloadConfig: lifted constants, objects
    data/constants/tensor_<n>                 raw storage bytes (or a torch.save pickle)
    data/constants/custom_obj_<n>             a torchbind object (pickle)
    data/constants/opaque_obj_<n>             an opaque Python object (pickle)
    data/sample_inputs/<model>.pt             example inputs (a torch.save pickle, or empty)
    extra/<name>                              extra files (torch reads them as text)

plus directory entries of those folders. `data/aotinductor/*` and shared libraries are refused
as native code; torch's older layouts (`serialized_exported_program.json` at the zip root,
`data/weights/<model>.pt` pickled state dicts) as legacy.

A member is listed in `Archive.pickled` when torch would unpickle it (a `use_pickle` payload, a
custom or opaque object, non-empty sample inputs) or when its first bytes sniff as a pickle
(protocol opcode 0x80 then 2..5) or a torch.save zip (PK\\x03\\x04). Raw tensor members are
sniffed too, and a stored one counts only when it also ends in the pickle STOP opcode, so that
raw bytes that merely start with 0x80 are not taken for a pickle.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from types import TracebackType

from app.archive.errors import ArchiveFailure
from app.archive.raw import RawTensor, Streamed, StreamedTensor, TensorKind
from app.archive.tensors import check_storage, concrete
from app.archive.zipdir import ZipSource
from app.archive.zipread import ZipReader
from app.settings import Limits, MiB
from schema import DocumentInvalid, Issue, PayloadConfig, PayloadMeta, TensorMeta, load
from schema.errors import pointer

ARCHIVE_FORMAT = "archive_format"
ARCHIVE_VERSION = "archive_version"
BYTEORDER = "byteorder"
DATA_VERSION = ".data/version"
SERIALIZATION_ID = ".data/serialization_id"
MODEL_DOCUMENT = "models/{}.json"
WEIGHTS_CONFIG = "data/weights/{}_weights_config.json"
CONSTANTS_CONFIG = "data/constants/{}_constants_config.json"
SAMPLE_INPUTS = "data/sample_inputs/{}.pt"
WEIGHTS_DIR = "data/weights/"
CONSTANTS_DIR = "data/constants/"
EXTRA_DIR = "extra/"

_MARKER_LIMIT = 64
_MARKERS: dict[str, re.Pattern[bytes]] = {
    ARCHIVE_FORMAT: re.compile(rb"pt2"),
    ARCHIVE_VERSION: re.compile(rb"0"),
    BYTEORDER: re.compile(rb"little"),
    DATA_VERSION: re.compile(rb"[0-9]{1,8}\n?"),
    SERIALIZATION_ID: re.compile(rb"[0-9]{1,64}"),
}
_REQUIRED_MARKERS = (ARCHIVE_FORMAT, ARCHIVE_VERSION)
_DIRECTORIES = {
    "",
    "models/",
    "data/",
    WEIGHTS_DIR,
    CONSTANTS_DIR,
    "data/sample_inputs/",
    EXTRA_DIR,
    ".data/",
}
_NAME = r"(?P<model>[^/]+)"
_DOCUMENT_RE = re.compile(rf"models/{_NAME}\.json")
_WEIGHTS_CONFIG_RE = re.compile(rf"data/weights/{_NAME}_weights_config\.json")
_CONSTANTS_CONFIG_RE = re.compile(rf"data/constants/{_NAME}_constants_config\.json")
_SAMPLE_INPUTS_RE = re.compile(rf"data/sample_inputs/{_NAME}\.pt")
_WEIGHT_RE = re.compile(r"weight_(0|[1-9][0-9]*)")
_CONSTANT_TENSOR_RE = re.compile(r"tensor_(0|[1-9][0-9]*)")
_OBJECT_RE = re.compile(r"(custom_obj|opaque_obj)_(0|[1-9][0-9]*)")
_EXTRA_RE = re.compile(r"extra/.+")
#: payloads first: they are most of the members
_FILE_PATTERNS = (
    re.compile(r"data/weights/weight_(0|[1-9][0-9]*)"),
    re.compile(r"data/constants/(tensor|custom_obj|opaque_obj)_(0|[1-9][0-9]*)"),
    _DOCUMENT_RE,
    _WEIGHTS_CONFIG_RE,
    _CONSTANTS_CONFIG_RE,
    _SAMPLE_INPUTS_RE,
    _EXTRA_RE,
)
_LEGACY_PAYLOAD_RE = re.compile(r"data/(weights|constants)/[^/]+\.pt")
_LEGACY_TOP_LEVEL = {
    "version",
    "serialized_exported_program.json",
    "serialized_state_dict.pt",
    "serialized_state_dict.json",
    "serialized_constants.pt",
    "serialized_constants.json",
    "serialized_example_inputs.pt",
}
_NATIVE_SUFFIX_RE = re.compile(r"\.(so|dylib|dll|pyd)(\.[0-9]+)*$", re.IGNORECASE)
_AOTINDUCTOR_DIR = "data/aotinductor/"
_PICKLE_PROTOCOLS = range(2, 6)
_PICKLE_STOP = b"."
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class TensorEntry:
    """A weight or constant tensor: where its bytes are and how to read them."""

    #: fully qualified name; "<model>/<fqn>" when the archive holds several models.
    name: str
    model: str
    #: the zip member (full name, root included) holding its storage bytes.
    member: str
    kind: TensorKind
    meta: TensorMeta | None
    use_pickle: bool
    #: the member's declared uncompressed size in bytes.
    size: int


class Archive:
    """An opened, checked .pt2 archive; tensor bytes are read on demand and never unpickled."""

    def __init__(self, reader: ZipReader, root: str) -> None:
        self.reader = reader
        self.root = root
        self.documents: dict[str, bytes] = {}
        self.weights_configs: dict[str, PayloadConfig] = {}
        self.constants_configs: dict[str, PayloadConfig] = {}
        self.tensors: dict[str, TensorEntry] = {}
        #: custom (torchbind) and opaque objects: name -> member; always pickles.
        self.objects: dict[str, str] = {}
        #: sample inputs member of each model.
        self.sample_inputs: dict[str, str] = {}
        self.extra: list[str] = []
        self.pickled: list[str] = []

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying file if the archive was opened from a path."""
        self.reader.close()

    def relative(self, member: str) -> str:
        """A member's name inside the root folder."""
        return member[len(self.root) + 1 :]

    def tensor(self, name: str) -> RawTensor:
        """The tensor `name` with its verified storage bytes (archive-pickled-tensor if pickled)."""
        entry = self._raw_entry(name)
        assert entry.meta is not None
        data = self.reader.read_member(entry.member, entry.size)
        return RawTensor(entry.name, entry.kind, entry.meta, data)

    def iter_tensor(self, name: str, chunk: int = MiB) -> Iterator[bytes]:
        """Stream the tensor `name`'s storage bytes; the last step checks size and CRC."""
        return self.reader.iter_member(self._raw_entry(name).member, chunk)

    def raw_tensors(self) -> list[RawTensor]:
        """Every non-pickled tensor; tensors sharing a member share one bytes object."""
        data: dict[str, bytes] = {}
        out: list[RawTensor] = []
        for entry in self.tensors.values():
            if entry.use_pickle:
                continue
            if entry.member not in data:
                data[entry.member] = self.reader.read_member(entry.member, entry.size)
            assert entry.meta is not None
            out.append(RawTensor(entry.name, entry.kind, entry.meta, data[entry.member]))
        return out

    def streamed(self, member: str) -> Streamed:
        """A member's bytes as the writer streams them (size and CRC checked as they pass)."""
        entry = self.reader.member(member)
        return Streamed(entry.size, entry.crc, partial(self.reader.iter_member, member))

    def streamed_tensors(self, model: str | None = None) -> list[StreamedTensor]:
        """Every non-pickled tensor (of `model` only, named by its FQN there, if given), read
        only when written; tensors sharing a member share one `Streamed`, so the writer stores
        them once, as `raw_tensors` does."""
        prefix = f"{model}/" if model is not None and len(self.documents) > 1 else ""
        streams: dict[str, Streamed] = {}
        out: list[StreamedTensor] = []
        for entry in self.tensors.values():
            if entry.use_pickle or (model is not None and entry.model != model):
                continue
            assert entry.meta is not None
            if entry.member not in streams:
                streams[entry.member] = self.streamed(entry.member)
            name = entry.name.removeprefix(prefix)
            out.append(StreamedTensor(name, entry.kind, entry.meta, streams[entry.member]))
        return out

    def opaque_members(self, limit: int) -> dict[str, bytes]:
        """Sample inputs and extra files by root-relative name, as `write_archive` takes them."""
        names = [*self.sample_inputs.values(), *self.extra]
        return {self.relative(n): self.reader.read_member(n, limit) for n in names}

    def _raw_entry(self, name: str) -> TensorEntry:
        entry = self.tensors.get(name)
        if entry is None:
            raise ArchiveFailure("archive-missing-member", f"no tensor named {name!r}")
        if entry.use_pickle:
            raise ArchiveFailure(
                "archive-pickled-tensor",
                f"tensor {name!r} is stored as a pickle ({entry.member}); it is never unpickled",
            )
        return entry


def open_archive(source: ZipSource, limits: Limits | None = None) -> Archive:
    """Open and check a .pt2 archive (bytes, a path or a seekable binary file)."""
    reader = ZipReader(source, limits, single_root=False)
    try:
        return _Opener(reader).open()
    except BaseException:
        reader.close()
        raise


class _Opener:
    """Classifies members against the layout, then reads markers, documents and configs."""

    def __init__(self, reader: ZipReader) -> None:
        self.reader = reader
        self.limits = reader.limits

    def open(self) -> Archive:
        names = self.reader.names
        _refuse_native_and_legacy(names)
        root = self.reader.root()
        archive = Archive(self.reader, root)
        self.archive = archive
        files = [n[len(root) + 1 :] for n in names]
        if ARCHIVE_FORMAT not in files:
            raise ArchiveFailure(
                "archive-not-pt2", f"no {root}/{ARCHIVE_FORMAT} member: not a .pt2 archive"
            )
        self._classify(files)
        self._markers(files)
        models = [m.group("model") for f in files if (m := _DOCUMENT_RE.fullmatch(f))]
        if not models:
            raise ArchiveFailure(
                "archive-missing-member", f"no {root}/models/<name>.json document in the archive"
            )
        self._refuse_orphans(files, models)
        referenced: set[str] = set()
        for model in models:
            archive.documents[model] = self._json(MODEL_DOCUMENT.format(model))
            weights = self._config(WEIGHTS_CONFIG.format(model))
            constants = self._config(CONSTANTS_CONFIG.format(model))
            archive.weights_configs[model] = weights
            archive.constants_configs[model] = constants
            prefix = "" if len(models) == 1 else f"{model}/"
            referenced |= self._payloads(model, prefix, weights, WEIGHTS_DIR)
            referenced |= self._payloads(model, prefix, constants, CONSTANTS_DIR)
            archive.sample_inputs[model] = self._require(SAMPLE_INPUTS.format(model))
        unreferenced = sorted(
            f
            for f in files
            if f.startswith((WEIGHTS_DIR, CONSTANTS_DIR))
            and not f.endswith(("_config.json", "/"))
            and f not in referenced
        )
        if unreferenced:
            raise ArchiveFailure(
                "archive-unexpected-member",
                f"member {root}/{unreferenced[0]} is not referenced by any config",
            )
        archive.extra = [
            self._full(f) for f in files if _EXTRA_RE.fullmatch(f) and not f.endswith("/")
        ]
        archive.pickled = self._pickled()
        return archive

    def _full(self, relative: str) -> str:
        return f"{self.archive.root}/{relative}"

    def _classify(self, files: list[str]) -> None:
        for f in files:
            if not f or f.endswith("/"):
                allowed = f in _DIRECTORIES or f.startswith(EXTRA_DIR)
            else:
                allowed = f in _MARKERS or any(p.fullmatch(f) for p in _FILE_PATTERNS)
            if not allowed:
                raise ArchiveFailure(
                    "archive-unexpected-member",
                    f"member {self._full(f)} is not part of the .pt2 layout",
                )

    def _markers(self, files: list[str]) -> None:
        present = set(files)
        for marker, pattern in _MARKERS.items():
            if marker not in present:
                if marker in _REQUIRED_MARKERS:
                    raise ArchiveFailure(
                        "archive-missing-member", f"no {self._full(marker)} member"
                    )
                continue
            member = self.reader.member(self._full(marker))
            value = (
                self.reader.read_member(member.name, _MARKER_LIMIT)
                if member.size <= _MARKER_LIMIT
                else None
            )
            if value is None or not pattern.fullmatch(value):
                shown = "too long" if value is None else repr(value)
                raise ArchiveFailure(
                    "archive-bad-marker",
                    f"member {member.name} is {shown}; expected {pattern.pattern.decode()!r}",
                )

    def _refuse_orphans(self, files: list[str], models: list[str]) -> None:
        """Configs and sample inputs must belong to a model that has a document."""
        known = set(models)
        for f in files:
            for pattern in (_WEIGHTS_CONFIG_RE, _CONSTANTS_CONFIG_RE, _SAMPLE_INPUTS_RE):
                match = pattern.fullmatch(f)
                if match and match.group("model") not in known:
                    raise ArchiveFailure(
                        "archive-unexpected-member",
                        f"member {self._full(f)} belongs to no models/<name>.json document",
                    )

    def _require(self, relative: str) -> str:
        name = self._full(relative)
        if name not in self.reader.members:
            raise ArchiveFailure("archive-missing-member", f"no {name} member")
        return name

    def _json(self, relative: str) -> bytes:
        name = self._require(relative)
        limit = self.limits.max_json_bytes
        size = self.reader.member(name).size
        if size > limit:
            raise ArchiveFailure(
                "archive-json-too-large",
                f"member {name} declares {size} bytes (limit {limit})",
            )
        return self.reader.read_member(name, limit)

    def _config(self, relative: str) -> PayloadConfig:
        data = self._json(relative)
        try:
            return load(data, model=PayloadConfig)
        except DocumentInvalid as exc:
            raise ArchiveFailure(
                "archive-bad-config", f"member {self._full(relative)}: {exc}", exc.issues
            ) from None

    def _payloads(self, model: str, prefix: str, config: PayloadConfig, directory: str) -> set[str]:
        """Record a config's tensors and objects; returns the members it references."""
        config_member = self._full(
            (WEIGHTS_CONFIG if directory == WEIGHTS_DIR else CONSTANTS_CONFIG).format(model)
        )
        members: set[str] = set()
        shared: dict[str, tuple[bool, int]] = {}
        for fqn, payload in config.config.items():
            is_object = directory == CONSTANTS_DIR and bool(_OBJECT_RE.fullmatch(payload.path_name))
            full = self._payload_member(config_member, directory, fqn, payload.path_name, is_object)
            members.add(directory + payload.path_name)
            key = prefix + fqn
            if is_object:
                self.archive.objects[key] = full
                continue
            entry = self._tensor_entry(config_member, model, fqn, key, full, payload, directory)
            layout = (payload.use_pickle, _dtype(entry.meta))
            if shared.setdefault(full, layout) != layout:
                _bad_config(
                    config_member,
                    Issue(
                        "inconsistent-payload",
                        pointer(["config", fqn, "path_name"]),
                        f"{payload.path_name!r} is shared by tensors that disagree on use_pickle "
                        "or dtype",
                    ),
                )
            self.archive.tensors[key] = entry
        return members

    def _payload_member(
        self, config_member: str, directory: str, fqn: str, path_name: str, is_object: bool
    ) -> str:
        """The member a config entry names, checked in name and presence."""
        pattern = _WEIGHT_RE if directory == WEIGHTS_DIR else _CONSTANT_TENSOR_RE
        if not is_object and not pattern.fullmatch(path_name):
            expected = "weight_<n>" if directory == WEIGHTS_DIR else "tensor_<n>, custom_obj_<n>"
            _bad_config(
                config_member,
                Issue(
                    "bad-path-name",
                    pointer(["config", fqn, "path_name"]),
                    f"{path_name!r} is not a {expected} payload name",
                ),
            )
        full = self._full(directory + path_name)
        if full not in self.reader.members:
            raise ArchiveFailure(
                "archive-missing-member",
                f"{config_member} names {path_name!r} for {fqn!r}, but there is no {full} member",
            )
        return full

    def _tensor_entry(
        self,
        config_member: str,
        model: str,
        fqn: str,
        key: str,
        full: str,
        payload: PayloadMeta,
        directory: str,
    ) -> TensorEntry:
        """A tensor's entry, its meta checked against its member's bytes where they are raw."""
        size = self.reader.member(full).size
        kind: TensorKind = (
            "constant"
            if directory == CONSTANTS_DIR
            else "parameter"
            if payload.is_param
            else "buffer"
        )
        meta = payload.tensor_meta
        if payload.use_pickle and meta is not None:
            concrete(meta, f"tensor {key!r} ({full})")
        if not payload.use_pickle:
            if meta is None:
                _bad_config(
                    config_member,
                    Issue(
                        "missing-tensor-meta",
                        pointer(["config", fqn, "tensor_meta"]),
                        "a raw (use_pickle false) tensor needs its tensor_meta",
                    ),
                )
            assert meta is not None
            check_storage(meta, size, f"tensor {key!r} ({full})")
        return TensorEntry(
            name=key,
            model=model,
            member=full,
            kind=kind,
            meta=meta,
            use_pickle=payload.use_pickle,
            size=size,
        )

    def _pickled(self) -> list[str]:
        archive = self.archive
        found: set[str] = set(archive.objects.values())
        found |= {t.member for t in archive.tensors.values() if t.use_pickle}
        found |= {n for n in archive.sample_inputs.values() if self.reader.member(n).size}
        for name in archive.extra:
            if _sniffs_pickled(self.reader.head(name, 4), None):
                found.add(name)
        for entry in archive.tensors.values():
            if not entry.use_pickle and entry.member not in found:
                head = self.reader.head(entry.member, 4)
                # the last byte is read only for what starts as a pickle or a zip does
                if _sniffs_pickled(head, None) and _sniffs_pickled(
                    head, self.reader.tail(entry.member, 1)
                ):
                    found.add(entry.member)
        return sorted(found)


def _dtype(meta: TensorMeta | None) -> int:
    return -1 if meta is None else int(meta.dtype)


def _bad_config(member: str, issue: Issue) -> None:
    raise ArchiveFailure("archive-bad-config", f"member {member}: {issue.message}", [issue])


def _sniffs_pickled(head: bytes, tail: bytes | None) -> bool:
    """Whether bytes look like a pickle or a torch.save zip; `tail` (if known) must be STOP."""
    if head.startswith(_ZIP_MAGIC):
        return True
    is_pickle = len(head) >= 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS
    return is_pickle and (tail is None or tail == _PICKLE_STOP)


def _refuse_native_and_legacy(names: list[str]) -> None:
    for name in names:
        relative = name.split("/", 1)[1] if "/" in name else name
        if relative.startswith(_AOTINDUCTOR_DIR) or _NATIVE_SUFFIX_RE.search(name):
            raise ArchiveFailure(
                "archive-native-code",
                f"member {name} is native code (AOTInductor or a shared library); "
                "only exported programs are accepted",
            )
    for name in names:
        top_level = "/" not in name
        relative = name.split("/", 1)[1] if not top_level else name
        if (top_level and name in _LEGACY_TOP_LEVEL) or _LEGACY_PAYLOAD_RE.fullmatch(relative):
            raise ArchiveFailure(
                "archive-legacy-layout",
                f"member {name} belongs to torch's pre-2.8 .pt2 layout (pickled state dicts); "
                "re-save the program with torch.export.save from torch 2.8 or newer",
            )
