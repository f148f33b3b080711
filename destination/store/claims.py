"""Claims on the next version of a table, so that only one writer fills its directory (steps 2 and 5-6 of the
commit protocol, destination/store/commit.py)."""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from destination.on_disk import layout
from destination.runtime import logs
from destination.storage.base import Storage
from destination.store.versions import ClaimRefused

CLAIM_LEASE_SECONDS = 1800.0


class Claims:
    """One writer's claims: `_log/<N>.claim` and its takeover generations `_log/<N>.claim.<k>`, the highest of which
    holds the version. A claim is stale when it is this writer's own, its pid is dead on this host, or it is older
    than the lease."""

    def __init__(self, storage: Storage, writer_id: str, lease_seconds: float = CLAIM_LEASE_SECONDS) -> None:
        self.storage = storage
        self.writer_id = writer_id  # one writer per store; callers serialise a table's writes (TableLocks)
        self.lease_seconds = lease_seconds

    def claim(self, prefix: str, target: int) -> int | ClaimRefused:
        """The generation of the claim on `target` this writer now holds, or why it holds none.

        A stale claim (generation k, the highest) is taken over by creating generation k+1 if absent: of several
        writers that found it stale only one creates it, and only that one clears the unfinished directory."""
        generations = self.generations(prefix, target)
        if not generations:
            if not self.storage.create_exclusive(layout.claim_path(prefix, target), self._claim_body()):
                return ClaimRefused.BUSY
            return self._unless_committed(prefix, target, 0)
        if self.storage.exists(layout.log_path(prefix, target)):
            return ClaimRefused.COMMITTED
        top = generations[-1]
        try:
            holder = json.loads(self.storage.read_bytes(layout.claim_path(prefix, target, top)))
        except (FileNotFoundError, ValueError):
            return ClaimRefused.BUSY
        if not self._is_stale(holder):
            return ClaimRefused.BUSY
        if not self.storage.create_exclusive(layout.claim_path(prefix, target, top + 1), self._claim_body()):
            return ClaimRefused.BUSY  # another writer took it over first
        taken = self._unless_committed(prefix, target, top + 1)
        if taken is ClaimRefused.COMMITTED:
            return taken
        logs.warning(f"{prefix}: taking over version {target} (claim generation {top + 1}) from a writer that "
                     "stopped before committing")
        self.clear_unfinished(prefix, target)
        return top + 1

    def _claim_body(self) -> bytes:
        return json.dumps({"writer": self.writer_id, "host": socket.gethostname(), "pid": os.getpid(),
                           "at": time.time()}).encode()

    def _unless_committed(self, prefix: str, target: int, generation: int) -> int | ClaimRefused:
        """A claim created just after another writer committed `target` (and dropped its claims) holds nothing."""
        if self.storage.exists(layout.log_path(prefix, target)):
            self.storage.delete(layout.claim_path(prefix, target, generation))
            return ClaimRefused.COMMITTED
        return generation

    def generations(self, prefix: str, target: int) -> list[int]:
        paths = self.storage.list_starting_with(layout.claim_path(prefix, target))
        return sorted(g for g in (layout.parse_claim_generation(p, prefix, target) for p in paths) if g is not None)

    def holds(self, prefix: str, target: int, generation: int) -> bool:
        generations = self.generations(prefix, target)
        return bool(generations) and generations[-1] == generation

    def drop(self, prefix: str, target: int) -> None:
        """Every generation, the highest last: while it stands, no other writer can take the version over."""
        for generation in self.generations(prefix, target):
            self.storage.delete(layout.claim_path(prefix, target, generation))

    def _is_stale(self, holder: dict[str, Any]) -> bool:
        if holder.get("writer") == self.writer_id:
            return True  # ours, from an attempt that died; the caller holds the table lock
        if holder.get("host") == socket.gethostname():
            try:
                os.kill(int(holder.get("pid", -1)), 0)
            except ProcessLookupError:
                return True
            except (PermissionError, ValueError, OverflowError):
                pass
        return time.time() - float(holder.get("at", 0)) > self.lease_seconds

    def clear_unfinished(self, prefix: str, target: int) -> None:
        self.storage.delete_prefix(layout.version_dir(prefix, target))
        self.storage.delete_prefix(layout.changes_dir(prefix, target))
