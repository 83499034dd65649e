"""Proving a `torch.save` file loads with torch's `weights_only` unpickler, without loading it.

Sample inputs are `torch.save` files that `torch.export.load` reads with `weights_only=True` and,
if that raises for any reason, reads again with the full unpickler. So a sample-inputs member is
safe to carry only when the `weights_only` load would succeed: this module runs the pickle machine
(`pickle_machine`) with torch's rules as a policy (`weights_only`), and checks the zip layout
`torch.load` reads around the pickle.
"""

from __future__ import annotations

import re
from typing import Any

from app.archive.pickle_machine import Machine
from app.archive.pickle_symbols import PickleLimits, PickleRefused, Survey
from app.archive.weights_only import TORCH_OPCODES, Rules, WeightsOnly, rules
from app.archive.zipread import ZipReader
from app.failure import Failure
from app.settings import Limits

__all__ = [
    "TORCH_OPCODES",
    "PickleRefused",
    "Rules",
    "check_torch_save",
    "imports",
    "rules",
    "weights_only_load",
]


_MAX_PICKLE_BYTES = 64 * 1024 * 1024


# -- the torch.save file -----------------------------------------------------------------------


def weights_only_load(
    data: bytes, records: dict[str, int], limits: PickleLimits | None = None
) -> Any:
    """The symbolic object torch's weights_only loader makes of a data.pkl, or PickleRefused.

    `records` maps each storage key to the byte size of its `data/<key>` record.
    """
    policy = WeightsOnly(rules(), records)
    machine = Machine(data, policy, limits)
    policy.machine = machine
    return machine.run()


def imports(data: bytes, limits: PickleLimits | None = None) -> list[str]:
    """Every global a full unpickler would import for `data` (simulated, nothing imported)."""
    survey = Survey()
    try:
        Machine(data, survey, limits).run()
    except PickleRefused:
        pass  # what was named before the pickle broke still says what it is after
    return survey.globals


def _pickle_reasons(data: bytes, records: dict[str, int]) -> list[str]:
    try:
        weights_only_load(data, records)
    except PickleRefused as exc:
        allowed = rules()
        foreign = [g for g in dict.fromkeys(imports(data)) if allowed.entry(g) is None]
        return [exc.message] + [f"would import {g}" for g in foreign]
    return []


def check_torch_save(data: bytes, limits: Limits) -> list[str]:
    """Why torch's weights_only loader would not load this `torch.save` file; [] when it would.

    Only the zip format (torch.save's default since 1.6) is proven; torch.load reads a legacy
    file through several pickles, which we refuse.
    """
    # torch.load takes a file for a zip only when it starts with a local header (_is_zipfile);
    # any other start is read as the legacy format, which it unpickles from the first byte
    if not data.startswith(b"PK\x03\x04"):
        return ["not a torch.save zip (the legacy format is not proven)"]
    try:
        with ZipReader(data, limits) as inner:
            root = inner.root()
            reasons = _zip_layout(inner, root)
            if reasons:
                return reasons
            prefix = f"{root}/data/"
            records = {}
            for name in inner.names:
                if name.startswith(prefix):
                    records[name[len(prefix) :]] = inner.members[name].size
                    for _ in inner.iter_member(name):
                        pass  # torch reads every storage it loads: sizes and CRCs must hold
            pickle = inner.read_member(f"{root}/data.pkl", _MAX_PICKLE_BYTES)
    except Failure as exc:
        return [f"the zip cannot be read: {exc.message}"]
    return _pickle_reasons(pickle, records)


#: the file format versions torch's zip reader takes (caffe2/serialize/versions.h)
_FORMAT_VERSIONS = range(1, 11)
#: how torch's C++ reader parses a version (`istream >> long long`: a prefix, the rest ignored)
_VERSION = re.compile(rb"\s*([+-]?[0-9]+)")


def _zip_layout(inner: ZipReader, root: str) -> list[str]:
    """What torch.load checks of the zip before it unpickles data.pkl."""
    names = set(inner.names)
    if f"{root}/constants.pkl" in names:
        return ["a TorchScript archive, which torch.load refuses with weights_only"]
    version = f"{root}/.data/version" if f"{root}/.data/version" in names else f"{root}/version"
    if version not in names:
        return ["no version record"]
    number = _VERSION.match(inner.read_member(version, 64))
    if number is None or int(number.group(1)) not in _FORMAT_VERSIONS:
        return [f"format version is not one torch reads ({_FORMAT_VERSIONS[0]} to 10)"]
    if f"{root}/data.pkl" not in names:
        return ["no data.pkl"]
    byteorder = f"{root}/byteorder"
    if byteorder in names and inner.read_member(byteorder, 16) not in (b"little", b"big"):
        return ["byteorder is neither little nor big"]
    alignment = f"{root}/.storage_alignment"
    if alignment in names:
        try:
            int(inner.read_member(alignment, 64))  # torch.load parses it with int()
        except ValueError:
            return [".storage_alignment is not a number"]
    return []
