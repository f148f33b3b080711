"""In-process table locks: the RPC handlers serialise a table's requests, since a store is one writer
(destination/store/claims.py keeps other processes' writers apart)."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from destination.shared.errors import CommitConflict


class TableLocks:
    """In-process locks so that requests for the same table never interleave."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str, str], threading.Lock] = {}

    @contextmanager
    def hold(self, root: str, schema: str, table: str, timeout: float | None = None) -> Iterator[None]:
        """Hold the table's lock; with a timeout, raise CommitConflict when it stays busy (a second lock taken
        while holding one must not wait forever on a request that waits for ours)."""
        key = (root, schema, table)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        if not lock.acquire(timeout=-1 if timeout is None else timeout):
            raise CommitConflict(f"table {schema}.{table} is busy with another request; retry")
        try:
            yield
        finally:
            lock.release()
