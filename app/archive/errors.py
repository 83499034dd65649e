"""The archive layer's coded failures: one exception type and the registry of its codes."""

from __future__ import annotations

from app.failure import Failure, ProblemCode

#: Every code this layer raises, with what it means; the API maps codes to HTTP problems.
CODES: dict[ProblemCode, str] = {
    "archive-not-zip": "the bytes are not a zip archive",
    "archive-truncated": "the zip ends before a structure it declares",
    "archive-corrupt": "a zip structure is malformed (records, counts, offsets, extra fields)",
    "archive-ambiguous-end": "the archive comment holds another end-of-central-directory "
    "record, which other zip readers (torch's) would read instead",
    "archive-too-many-members": "the zip declares more members than settings.max_members",
    "archive-duplicate-name": "two members share one name",
    "archive-overlap": "two members' byte ranges overlap (or run into the central directory)",
    "archive-bad-name": "a member name is absolute, has '..', '.', empty parts, '\\\\', NUL or "
    "is over 1024 characters",
    "archive-symlink": "a member is a symbolic link",
    "archive-special-file": "a member is a device, FIFO or socket",
    "archive-many-roots": "the members do not share a single top-level directory",
    "archive-header-mismatch": "a local header or data descriptor disagrees with the central "
    "directory",
    "archive-too-large": "the declared uncompressed total is over settings.max_total_uncompressed",
    "archive-ratio-too-high": "a member over 1 MiB declares a compression ratio over "
    "settings.max_member_ratio",
    "archive-unsupported-compression": "a member uses a compression method other than stored "
    "or deflate",
    "archive-encrypted": "a member is encrypted",
    "archive-crc-mismatch": "a member's CRC-32 differs from the declared one",
    "archive-size-mismatch": "a member's actual size differs from the declared one",
    "archive-bad-deflate": "a member's deflate stream is invalid",
    "archive-member-too-large": "a member is larger than the caller's limit",
    "archive-missing-member": "a member the layout or a config requires is absent",
    "archive-not-pt2": "the zip is not a .pt2 archive (no archive_format member)",
    "archive-bad-marker": "a marker member (archive_format, archive_version, byteorder, "
    ".data/version, .data/serialization_id) has an unsupported value",
    "archive-unexpected-member": "a member that the .pt2 layout does not allow",
    "archive-native-code": "the archive carries native code (AOTInductor, shared libraries)",
    "archive-legacy-layout": "the archive uses torch's pre-2.8 layout",
    "archive-json-too-large": "a JSON member is over settings.max_json_bytes",
    "archive-bad-config": "a weights/constants config is invalid",
    "archive-bad-tensor-meta": "a stored tensor's meta is symbolic, negative or inconsistent",
    "archive-tensor-size-mismatch": "a stored tensor's meta does not fit its member's bytes",
    "archive-pickled-tensor": "the tensor is stored as a pickle, which is never unpickled",
    "archive-write-refused": "write_archive was given inputs it cannot write as a valid .pt2",
}


class ArchiveFailure(Failure):
    """A coded failure of reading or writing a zip or .pt2 archive (codes in `CODES`)."""
