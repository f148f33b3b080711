"""In-process table locks: the RPC handlers serialise a table's requests, since a store is one writer
(destination/store/claims.py keeps other processes' writers apart)."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from destination.runtime.errors import CommitConflict


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0  # requests holding the lock or waiting for it


class TableLocks:
    """In-process locks so that requests for the same table never interleave. A table's lock exists only while a
    request holds or awaits it: a server that runs for weeks over tables created, renamed and dropped keeps none
    for the tables it is not writing now."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str, str], _Entry] = {}

    def __len__(self) -> int:
        """The tables with a lock now (held or awaited)."""
        with self._guard:
            return len(self._locks)

    @contextmanager
    def hold(self, root: str, schema: str, table: str, timeout: float | None = None) -> Iterator[None]:
        """Hold the table's lock; with a timeout, raise CommitConflict when it stays busy (a second lock taken
        while holding one must not wait forever on a request that waits for ours)."""
        key = (root, schema, table)
        with self._guard:
            entry = self._locks.setdefault(key, _Entry())
            entry.users += 1
        try:
            if not entry.lock.acquire(timeout=-1 if timeout is None else timeout):
                raise CommitConflict(f"table {schema}.{table} is busy with another request; retry")
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            with self._guard:  # the last user forgets the lock: a later request makes a new one
                entry.users -= 1
                if entry.users == 0:
                    del self._locks[key]
