""".pt2 archives without torch: distrustful zip reading, the layout, raw tensors, writing."""

from app.archive.errors import CODES, ArchiveFailure
from app.archive.manifest import ManifestEntry, manifest
from app.archive.pt2 import Archive, TensorEntry, open_archive
from app.archive.raw import RawTensor, TensorKind
from app.archive.tensors import check_storage, dtype_name, storage_nbytes
from app.archive.writer import write_archive
from app.archive.zipdir import RATIO_FLOOR, ZipMember, ZipSource
from app.archive.zipread import ZipReader
from schema.dtypes import DTYPE_NAMES, ITEMSIZE

__all__ = [
    "CODES",
    "DTYPE_NAMES",
    "ITEMSIZE",
    "RATIO_FLOOR",
    "Archive",
    "ArchiveFailure",
    "ManifestEntry",
    "RawTensor",
    "TensorEntry",
    "TensorKind",
    "ZipMember",
    "ZipReader",
    "ZipSource",
    "check_storage",
    "dtype_name",
    "manifest",
    "open_archive",
    "storage_nbytes",
    "write_archive",
]
