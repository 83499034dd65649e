"""Answers about stored versions (their validation, inspection, ranges and diffs): computed
from the stored archives under the same admission budget an upload of their documents gets, in a
document worker when they are large, and held by what they are computed from, since stored
versions never change: six readers of one version cost one parse."""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar, TypeVarTuple

import anyio
from fastapi import Request
from fastapi.responses import Response
from pydantic_core import to_json

from app.api.deps import admit_bytes
from app.registry.stored import StoredArchive

_JSON = "application/json"
_T = TypeVar("_T")
_R = TypeVar("_R")
_Ts = TypeVarTuple("_Ts")


class _Answers:
    """Answers about stored versions, by what they are computed from (an archive digest and
    the view's parameters: stored versions never change), newest kept, within a byte budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held: OrderedDict[Hashable, bytes] = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()
        #: one computation per key at a time: readers arriving meanwhile wait for its answer
        self.computing: weakref.WeakValueDictionary[Hashable, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def get(self, key: Hashable) -> bytes | None:
        """The answer computed for `key`, if it is still held."""
        with self.lock:
            found = self.held.get(key)
            if found is not None:
                self.held.move_to_end(key)
            return found

    def put(self, key: Hashable, body: bytes) -> None:
        """Hold `body` (answers larger than a quarter of the budget are not held)."""
        if len(body) > self.budget // 4:
            return
        with self.lock:
            old = self.held.pop(key, None)
            self.size += len(body) - (len(old) if old is not None else 0)
            self.held[key] = body
            while self.size > self.budget:
                _, dropped = self.held.popitem(last=False)
                self.size -= len(dropped)


#: the answers one HTTP process holds (a few large inspect or diff answers, many small ones)
ANSWERS_BUDGET = 16 * 1024 * 1024


def answers_of(request: Request) -> _Answers:
    """The app's held answers about stored versions (made on first use)."""
    state = request.app.state
    if not hasattr(state, "stored_answers"):
        state.stored_answers = _Answers(ANSWERS_BUDGET)
    held: _Answers = state.stored_answers
    return held


async def run_sync(call: Callable[..., _T], *args: Any) -> _T:
    """`call(*args)` on a worker thread (registry lookups are database I/O)."""
    return await anyio.to_thread.run_sync(functools.partial(call, *args))


def _as_is(result: Any) -> Any:
    return result


async def on_stored(
    request: Request,
    key: Hashable,
    stored: list[StoredArchive],
    job: Callable[[*_Ts], _R],
    args: tuple[*_Ts],
    shape: Callable[[_R], Any] = _as_is,
) -> Response:
    """The JSON answer `job` (a job of app.jobs) computes from its `args` and `stored`
    archives, held by `key`: computed once, under the admission budget an upload of their
    documents would get, in a document worker when they are large (never parsed in this
    process above the inline size); later readers get the held bytes."""
    answers = answers_of(request)
    body = answers.get(key)
    if body is None:
        lock = answers.computing.setdefault(key, asyncio.Lock())
        async with lock:
            body = answers.get(key)
            if body is None:
                size = sum(archive.document_bytes for archive in stored)
                async with admit_bytes(request, size) as work:
                    result = await run_sync(work.run, job, *args)
                body = to_json(shape(result))
                answers.put(key, body)
    return Response(body, media_type=_JSON)
