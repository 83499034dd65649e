"""A process tree read from /proc: which processes of `pt2serde serve` run, in which role and
with how much memory (the lifeline tests and the bench's footprint and torch path rows)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Process:
    """One process of the server's tree: what it is, its resident and proportional set sizes."""

    pid: int
    role: str
    rss: int
    pss: int


def _kib(path: str, field: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0  # the process is gone


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _role(pid: int, parent_role: str) -> str:
    cmdline = _cmdline(pid)
    if not parent_role:
        return "supervisor"
    if b"resource_tracker" in cmdline:
        return "resource tracker"
    if parent_role == "supervisor":
        return "HTTP process"
    if b"forkserver" in cmdline:
        return "torch worker" if parent_role == "torch forkserver" else "torch forkserver"
    return "document worker"


def processes(root: int) -> list[Process]:
    """Every live process under `root` (itself included), with its role and memory."""
    found: list[Process] = []
    pending = [(root, "")]
    while pending:
        pid, parent_role = pending.pop()
        role = _role(pid, parent_role)
        rss = _kib(f"/proc/{pid}/status", "VmRSS")
        if rss:
            found.append(Process(pid, role, rss, _kib(f"/proc/{pid}/smaps_rollup", "Pss")))
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                pending.extend((int(child), role) for child in task.read_text().split())
            except OSError:
                continue
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, gone but not yet waited for, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False
