"""Structured mutations of .pt2 archives: their documents, configs, tensors and markers, and the
zip structure itself (headers, declared sizes, CRCs, methods, names, order, overlaps, bombs).

Archives are rebuilt member by member with tests.archive.zipcraft, so every header field can lie
independently of the bytes it describes.
"""

from __future__ import annotations

import io
import stat
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from tests.archive import zipcraft
from tests.archive.zipcraft import Member
from tests.fuzz import jsonmut
from tests.fuzz.jsonmut import Context
from tests.hostile import evil_pickle


@dataclass(frozen=True)
class Entry:
    """One member of a base archive: its name and bytes."""

    name: str
    data: bytes


def entries(archive: bytes) -> list[Entry]:
    """The members of one of our own (trusted) base archives, in order."""
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return [Entry(info.filename, zf.read(info)) for info in zf.infolist()]


def _root(members: list[Entry]) -> str:
    return members[0].name.split("/", 1)[0]


def _named(members: list[Entry], suffix: str) -> list[int]:
    return [i for i, m in enumerate(members) if m.name.endswith(suffix)]


# ---------------------------------------------------------------- content mutations


def document(ctx: Context, members: list[Entry]) -> str | None:
    """Mutate the model document (structure-aware, sometimes also as bytes)."""
    found = [i for i, m in enumerate(members) if "/models/" in m.name and m.name.endswith(".json")]
    if not found:
        return None
    i = ctx.rng.choice(found)
    doc = jsonmut.parse(members[i].data)
    if doc is None:
        return None
    steps = jsonmut.mutate_value(ctx, doc, ctx.rng.choice([1, 1, 1, 2, 3]))
    data = jsonmut.dump(ctx, doc)
    if ctx.rng.random() < 0.1:
        data, how = jsonmut.mutate_bytes(ctx, data)
        steps.append(how)
    members[i] = Entry(members[i].name, data)
    return "document: " + "; ".join(steps)


def config(ctx: Context, members: list[Entry]) -> str | None:
    """Mutate a weights or constants config: paths, pickles, metas, or anything."""
    found = _named(members, "_config.json")
    if not found:
        return None
    i = ctx.rng.choice(found)
    parsed = jsonmut.parse(members[i].data)
    if parsed is None:
        return None
    payloads = parsed.get("config") if isinstance(parsed, dict) else None
    if not isinstance(payloads, dict):
        payloads = {}
    entries = {k: v for k, v in payloads.items() if isinstance(v, dict)}
    how = ctx.rng.choice(["path", "pickle", "meta", "generic", "add"])
    if how == "generic" or not entries:
        how = "generic"
        jsonmut.mutate_value(ctx, parsed, 1)
        data = jsonmut.dump(ctx, parsed)
    else:
        entry = entries[ctx.rng.choice(sorted(entries))]
        if how == "path":
            paths = [
                e["path_name"] for e in entries.values() if isinstance(e.get("path_name"), str)
            ]
            entry["path_name"] = ctx.rng.choice(
                [
                    "../../etc/passwd",
                    "/etc/passwd",
                    "weight_999",
                    "",
                    "weight_0\x00",
                    "model_weights_config.json",
                    *paths,
                ]
            )
        elif how == "pickle":
            entry["use_pickle"] = True
        elif how == "meta" and isinstance(entry.get("tensor_meta"), dict):
            jsonmut.mutate_value(ctx, entry["tensor_meta"], 1)
        elif how == "meta":
            entry["tensor_meta"] = None
        else:
            payloads[f"evil.{ctx.rng.randrange(100)}"] = dict(entry)
        data = orjson.dumps(parsed)
    members[i] = Entry(members[i].name, data)
    return f"config {members[i].name.rsplit('/', 1)[-1]} {how}"


def tensor(ctx: Context, members: list[Entry]) -> str | None:
    """A stored tensor's bytes cut, grown, emptied or replaced by a pickle."""
    found = [
        i
        for i, m in enumerate(members)
        if "/data/" in m.name and not m.name.endswith(".json") and "sample_inputs" not in m.name
    ]
    if not found:
        return None
    i = ctx.rng.choice(found)
    data = members[i].data
    how = ctx.rng.choice(["cut", "grow", "empty", "pickle", "big"])
    new = {
        "cut": data[: len(data) // 2],
        "grow": data + b"\0" * ctx.rng.choice([1, 4, 4096]),
        "empty": b"",
        "pickle": evil_pickle_bytes(ctx),
        "big": bytes(ctx.rng.choice([1 << 20, 3 << 20])),
    }[how]
    members[i] = Entry(members[i].name, new)
    return f"tensor {members[i].name.rsplit('/', 1)[-1]} {how}"


def evil_pickle_bytes(ctx: Context) -> bytes:
    """A pickle that would create the marker if anyone loaded it."""
    return evil_pickle(Path(ctx.marker))


def markers(ctx: Context, members: list[Entry]) -> str | None:
    """A marker member (archive_format, archive_version, byteorder, .data/version) changed."""
    found = [
        i
        for i, m in enumerate(members)
        if m.name.endswith(("archive_format", "archive_version", "byteorder", ".data/version"))
    ]
    if not found:
        return None
    i = ctx.rng.choice(found)
    how = ctx.rng.choice(["value", "drop"])
    if how == "drop":
        name = members.pop(i).name
    else:
        name = members[i].name
        value = ctx.rng.choice([b"pt3", b"99", b"big", b"", b"\xff" * 3, b"pt2\n", b"1"])
        members[i] = Entry(name, value)
    return f"marker {name.rsplit('/', 1)[-1]} {how}"


def _hostile_names(root: str) -> list[str]:
    return [
        f"{root}/../evil",
        "/etc/evil",
        f"{root}\\data\\evil",
        f"{root}/data/weights/x\x00y",
        f"{root}//data/weights/weight_0",
        f"{root}/./models/model.json",
        "other/models/model.json",
        f"{root}/" + "a" * 1100,
        f"{root}/extra/notes.txt",
        f"{root}/extra/" + "b" * 300,
        f"{root}/data/weights/weight_999",
        f"{root}/data/aotinductor/model.so",
        f"{root}/data/constants/custom_obj_0",
        f"{root}/models/other.json",
        f"{root}/evil.py",
        f"C:/{root}/x",
        f"{root}/data/sample_inputs/evil.pt",
        f"{root}/",
    ]


def member_set(ctx: Context, members: list[Entry]) -> str | None:
    """Members added under hostile or unexpected names, dropped, renamed or duplicated."""
    root = _root(members)
    how = ctx.rng.choice(
        ["add", "add", "drop", "rename", "duplicate", "sample-inputs", "many", "second-model"]
    )
    i = ctx.rng.randrange(len(members))
    if how == "add":
        name = ctx.rng.choice(_hostile_names(root))
        members.insert(i, Entry(name, ctx.rng.choice([b"x", evil_pickle_bytes(ctx), b"{}"])))
        return f"add member {name[:40]!r}"
    if how == "drop":
        return f"drop member {members.pop(i).name}"
    if how == "rename":
        name = ctx.rng.choice(_hostile_names(root))
        old, members[i] = members[i].name, Entry(name, members[i].data)
        return f"rename {old} -> {name[:40]!r}"
    if how == "duplicate":
        members.insert(ctx.rng.randrange(len(members) + 1), members[i])
        return f"duplicate member {members[i].name}"
    if how == "sample-inputs":
        found = _named(members, ".pt")
        if not found:
            return None
        j = found[0]
        members[j] = Entry(members[j].name, evil_pickle_bytes(ctx))
        return "evil sample inputs"
    if how == "second-model":
        # the same program again under another model name, with or without its configs
        other = ctx.rng.choice(["other", "model2", "Model", "a.b"])
        copies = [
            Entry(
                m.name.replace("/model.json", f"/{other}.json").replace("/model_", f"/{other}_"),
                m.data,
            )
            for m in members
            if m.name.endswith(("/model.json", "_config.json"))
            and (m.name.endswith("model.json") or ctx.rng.random() < 0.7)
        ]
        members.extend(copies)
        return f"second model {other!r} ({len(copies)} members)"
    count = ctx.rng.choice([50, 300, 1500])
    members.extend(Entry(f"{root}/extra/x{n}", b"x") for n in range(count))
    return f"{count} extra members"


CONTENT: tuple[Callable[[Context, list[Entry]], str | None], ...] = (
    document,
    document,
    document,
    document,
    config,
    config,
    tensor,
    markers,
    member_set,
    member_set,
)


# ---------------------------------------------------------------- zip structure


_SYMLINK = (stat.S_IFLNK | 0o777) << 16
_FIFO = (stat.S_IFIFO | 0o644) << 16
_UNIX = 3 << 8


def _lie(ctx: Context, members: list[Member]) -> str:
    """One header field of one member no longer tells the truth."""
    i = ctx.rng.randrange(len(members))
    m = members[i]
    how = ctx.rng.choice(
        [
            "size",
            "local-size",
            "crc",
            "method",
            "local-method",
            "local-name",
            "stored-extra",
            "flags",
            "symlink",
            "fifo",
            "extra",
        ]
    )
    if how == "size":
        m.size = ctx.rng.choice([0, m.size + 1, max(0, m.size - 1), m.size * 2, 0xFFFFFFFE])
    elif how == "local-size":
        m.local_size = ctx.rng.choice([0, m.size + 1, 0xFFFFFFFF])
    elif how == "crc":
        m.crc ^= 1 << ctx.rng.randrange(32)
    elif how == "method":
        m.method = ctx.rng.choice([1, 6, 9, 12, 14, 93, 95, 98, 99, 8 if m.method == 0 else 0])
    elif how == "local-method":
        m.local_method = ctx.rng.choice([0, 8, 12, 99])
    elif how == "local-name":
        m.local_name = m.name[:-1] + "X"
    elif how == "stored-extra":
        m.stored = m.stored + b"junk"
    elif how == "flags":
        m.flags = ctx.rng.choice([0x0001, 0x0008 | 0x0800, 0x0040, 0x2000, 0])
    elif how == "symlink":
        m.external_attr, m.made_by = _SYMLINK, _UNIX | 20
    elif how == "fifo":
        m.external_attr, m.made_by = _FIFO, _UNIX | 20
    else:
        m.extra = ctx.rng.choice(
            [
                b"\x01\x00\x08\x00" + struct.pack("<Q", 2**62),
                b"\x01\x00",
                b"\xff\xff\xff\xff",
                b"\x55\x54\x05\x00\x01\x00\x00\x00\x00",
            ]
        )
    return f"zip lie {how} {m.name.rsplit('/', 1)[-1]}"


def _bomb(ctx: Context, members: list[Member], root: str) -> str:
    size = ctx.rng.choice([900 << 10, 2 << 20, 8 << 20])
    zeros = bytes(size)
    name = f"{root}/data/weights/weight_0"
    bomb = zipcraft.deflated(name, zeros)
    members[:] = [m for m in members if m.name != name] + [bomb]
    return f"zip bomb {size >> 10} KiB"


@dataclass
class Layout:
    """A built zip and where its records start."""

    data: bytes
    local: list[int]
    central: list[int]
    end: int


def build(members: list[Member]) -> Layout:
    """Lay the members out (like zipcraft.build), remembering every record's offset."""
    body = bytearray()
    central = bytearray()
    local: list[int] = []
    centrals: list[int] = []
    for member in members:
        local.append(len(body))
        centrals.append(len(central))
        central += zipcraft.central_header(member, len(body))
        body += zipcraft.local_header(member) + member.stored
    start = len(body)
    end = start + len(central)
    data = bytes(body + central + zipcraft.end_record(len(members), len(central), start))
    return Layout(data, local, [start + c for c in centrals], end)


def _patch(data: bytes, at: int, fmt: str, value: int) -> bytes:
    size = struct.calcsize(fmt)
    return data[:at] + struct.pack(fmt, value) + data[at + size :]


def _after_build(ctx: Context, layout: Layout) -> tuple[bytes, str]:
    """A byte-level change of the built zip: truncation, flipped header bytes, overlapping
    entries, a lying end record, bytes before or after."""
    data = layout.data
    how = ctx.rng.choice(
        ["truncate", "flip-local", "flip-central", "flip-end", "overlap", "end-record", "prepend"]
    )
    if how == "truncate":
        at = ctx.rng.randrange(len(data))
        return data[:at], f"truncate at {at}/{len(data)}"
    if how.startswith("flip"):
        if how == "flip-local":
            start, span = ctx.rng.choice(layout.local), 30
        elif how == "flip-central":
            start, span = ctx.rng.choice(layout.central), 46
        else:
            start, span = layout.end, 22
        out = bytearray(data)
        for _ in range(ctx.rng.randint(1, 4)):
            at = min(len(out) - 1, start + ctx.rng.randrange(span))
            out[at] ^= 1 << ctx.rng.randrange(8)
        return bytes(out), how
    if how == "overlap" and len(layout.local) > 1:
        i, j = ctx.rng.sample(range(len(layout.local)), 2)
        target = layout.local[j] + ctx.rng.choice([0, 0, 7])
        return _patch(data, layout.central[i] + 42, "<I", target), f"overlap {i}->{j}"
    if how == "end-record":
        field, fmt = ctx.rng.choice([(8, "<H"), (10, "<H"), (12, "<I"), (16, "<I"), (20, "<H")])
        value = ctx.rng.choice([0, 1, 0xFFFF, 0xFFFFFFFF, len(data)])
        value &= 0xFFFF if fmt == "<H" else 0xFFFFFFFF
        return _patch(data, layout.end + field, fmt, value), f"end record +{field} = {value}"
    junk = ctx.rng.choice([b"MZ" + bytes(62), b"PK\x03\x04", b"\0" * 1000])
    if ctx.rng.random() < 0.5:
        return junk + data, "prepend junk"
    return data + junk, "append junk"


def zip_structure(ctx: Context, members: list[Entry]) -> tuple[bytes, list[str]]:
    """The members as a zip whose structure is mutated (lies, order, compression, bytes)."""
    root = _root(members)
    built = [
        zipcraft.deflated(m.name, m.data)
        if ctx.rng.random() < 0.3
        else zipcraft.stored(m.name, m.data)
        for m in members
    ]
    steps: list[str] = []
    for _ in range(ctx.rng.choice([1, 1, 2])):
        roll = ctx.rng.random()
        if roll < 0.55:
            steps.append(_lie(ctx, built))
        elif roll < 0.7:
            ctx.rng.shuffle(built)
            steps.append("reorder")
        elif roll < 0.8:
            steps.append(_bomb(ctx, built, root))
        else:
            copied = replace(ctx.rng.choice(built))
            built.insert(ctx.rng.randrange(len(built) + 1), copied)
            steps.append(f"duplicate entry {copied.name.rsplit('/', 1)[-1]}")
    layout = build(built)
    if ctx.rng.random() < 0.5:
        data, how = _after_build(ctx, layout)
        steps.append(how)
        return data, steps
    return layout.data, steps


def honest(members: list[Entry], deflate: bool) -> bytes:
    """The members as a plain zip (stored or deflated), headers telling the truth."""
    make = zipcraft.deflated if deflate else zipcraft.stored
    return zipcraft.build([make(m.name, m.data) for m in members])
