"""A small thread-safe LRU of finished response bodies.

Plan and recommend answers are pure functions of the request and the bundled
index, which only changes with a new release (a restart). Caching the encoded
JSON lets a repeated request skip the planner, the pydantic validation and the
JSON encoding: on a cache hit the route does a dict lookup and a socket write.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable, Optional


class ResponseCache:
    def __init__(self, maxsize: int = 1024) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Optional[bytes]:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: bytes) -> None:
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


async def cached_json(cache: ResponseCache, key: Hashable, compute: Callable[[], bytes]) -> bytes:
    """The cached body for ``key``, computing it in the thread pool on a miss."""
    from starlette.concurrency import run_in_threadpool

    body = cache.get(key)
    if body is None:
        body = await run_in_threadpool(compute)
        cache.put(key, body)
    return body
