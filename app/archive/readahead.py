"""Run an iterator on a helper thread, a bounded number of items ahead of its consumer.

Reading a member (file reads, inflation, its CRC-32) and what the consumer does with each block
(typically sha256) are C calls that release the GIL on large buffers, so with a second core the
two overlap instead of adding up. At most `depth` items wait between the threads, so memory
stays a few blocks whatever the stream's length.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Generator, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


def read_ahead(source: Iterator[T], depth: int) -> Generator[T, None, None]:
    """The items of `source`, produced on a helper thread; its exception is raised here.

    The thread starts at the first `next()`; closing (or dropping) the generator stops it and
    waits for it, so no thread outlives the stream.
    """
    if depth < 1:
        raise ValueError("depth must be at least 1")
    channel: _Channel[T] = _Channel(depth)
    worker = threading.Thread(
        target=channel.fill, args=(source,), name="zip-read-ahead", daemon=True
    )
    worker.start()
    try:
        yield from channel.drain()
    finally:
        channel.stop()
        worker.join()


class _Channel(Generic[T]):
    """A bounded hand-off from one producer thread to one consumer, which may leave early."""

    def __init__(self, depth: int) -> None:
        self._depth = depth
        self._items: deque[T] = deque()
        self._changed = threading.Condition()
        self._finished = False
        self._failure: BaseException | None = None
        self._stopped = False

    def fill(self, source: Iterator[T]) -> None:
        """Producer side: push every item of `source`, then its end or its exception."""
        failure: BaseException | None = None
        try:
            for item in source:
                if not self._put(item):
                    return
        # Whatever stops the producer must reach the consumer, or the consumer waits forever.
        except BaseException as exc:
            failure = exc
        with self._changed:
            self._finished, self._failure = True, failure
            self._changed.notify_all()

    def _put(self, item: T) -> bool:
        with self._changed:
            while len(self._items) >= self._depth and not self._stopped:
                self._changed.wait()
            if self._stopped:
                return False
            self._items.append(item)
            self._changed.notify_all()
            return True

    def drain(self) -> Iterator[T]:
        """Consumer side: the items in order, then the producer's exception if it had one."""
        while True:
            with self._changed:
                while not self._items and not self._finished:
                    self._changed.wait()
                if not self._items:
                    if self._failure is not None:
                        raise self._failure
                    return
                item = self._items.popleft()
                self._changed.notify_all()
            yield item

    def stop(self) -> None:
        """The consumer is gone: release a producer waiting for room and drop what is queued."""
        with self._changed:
            self._stopped = True
            self._items.clear()
            self._changed.notify_all()
