"""What this process committed last to each table's Delta log or Iceberg metadata, so that the table's next commit
builds on it instead of reading the format's files back (delta-rs opening the log; pyiceberg parsing the metadata
file and reading its manifest list and manifest): milliseconds of CPU and several requests on S3 for every small
sync. A kept state is used only while the format's newest entry is still the very file it was kept with, same
number and same bytes (compared by their SHA-256: an Iceberg metadata file grows with the snapshots retained):
another writer's commit, or a table dropped and made again, leaves it unused."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

S = TypeVar("S")


class LastCommits(Generic[S]):
    """One format's kept states, by the table folder's URL, within two bounds: `max_tables` tables, and
    `max_weight` in all by `weight` (what a state holds: its files, their statistics), the least recently committed
    forgotten first; a state heavier than `max_weight` alone is not kept (its table reads its files back)."""

    def __init__(self, weight: Callable[[S], int], max_weight: int, max_tables: int = 1024) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[int, bytes, S, int]] = OrderedDict()  # number, digest, state, weight
        self._weight, self._max_weight, self._max_tables = weight, max_weight, max_tables
        self._total = 0

    def state(self, table: str, newest: int, read_newest: Callable[[], bytes]) -> S | None:
        """The state kept for `table` when its newest entry, number `newest`, is the file it was kept with;
        `read_newest` reads that file's bytes (only called when a state of that number is kept)."""
        with self._lock:
            kept = self._kept.get(table)
        if kept is None or kept[0] != newest:
            return None
        try:
            same = hashlib.sha256(read_newest()).digest() == kept[1]
        except FileNotFoundError:
            return None
        return kept[2] if same else None

    def unverified(self, table: str, newest: int) -> S | None:
        """The state kept for `table` when its number is `newest`, not yet compared with the file (`state` does):
        its own files can be checked while the newest file is read."""
        with self._lock:
            kept = self._kept.get(table)
        return kept[2] if kept is not None and kept[0] == newest else None

    def keep(self, table: str, number: int, body: bytes, state: S) -> None:
        """Entry `number` of `table` was just committed as the file `body`; `state` is the table after it."""
        weight = self._weight(state)
        with self._lock:
            self._drop(table)
            if weight > self._max_weight:
                return
            self._kept[table] = (number, hashlib.sha256(body).digest(), state, weight)
            self._total += weight
            while len(self._kept) > self._max_tables or self._total > self._max_weight:
                self._drop(next(iter(self._kept)))

    def forget(self, table: str) -> None:
        with self._lock:
            self._drop(table)

    @property
    def weight(self) -> int:
        """The kept states' weight in all."""
        return self._total

    def _drop(self, table: str) -> None:
        dropped = self._kept.pop(table, None)
        if dropped is not None:
            self._total -= dropped[3]
