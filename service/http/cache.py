"""A small thread-safe LRU of finished response bodies.

Plan and recommend answers are pure functions of the request and the bundled
index, which only changes with a new release (a restart). Caching the encoded
JSON lets a repeated request skip the planner, the pydantic validation and the
JSON encoding: on a cache hit the route does a dict lookup and a socket write.
A "cannot be planned" answer is cached too: it is as pure as a plan, and
finding out costs the most (the planner searches for a GPU count that would do).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable, Optional

Answer = tuple[int, bytes]  # (HTTP status, encoded JSON body)


class ResponseCache:
    def __init__(self, maxsize: int = 1024) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Answer] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Optional[Answer]:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: Answer) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)


async def cached_answer(cache: ResponseCache, key: Hashable, compute: Callable[[], Answer]) -> Answer:
    """The cached answer for ``key``, computing it in the thread pool on a miss."""
    from starlette.concurrency import run_in_threadpool

    answer = cache.get(key)
    if answer is None:
        answer = await run_in_threadpool(compute)
        cache.put(key, answer)
    return answer
