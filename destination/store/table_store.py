"""The table store: load the latest committed version, and commit a new one atomically (the commit protocol:
destination/store/commit.py). `TableStore` is what callers hold; its parts do the work: table names
(table_names.py), loading (loading.py), claims (claims.py), carry-forward (carry.py), the commit (commit.py) and
retention (retention.py)."""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from destination.on_disk.options import COMPLETE, LAYOUTS
from destination.on_disk.options import Retention as Retention  # re-exported: callers build stores with it
from destination.storage.base import Storage
from destination.store.carry import CarryForward
from destination.store.claims import CLAIM_LEASE_SECONDS, Claims
from destination.store.commit import Committer, Publish
from destination.store.loading import VersionReader
from destination.store.retention import VersionRetention
from destination.store.table_names import TableNames
from destination.store.versions import (
    Attempt,
    CommitEvent,
    Copies,
    FaultHook,
    PendingVersion,
    Publisher,
    Repair,
    RequestIdentity,
    TableVersion,
)

# for tests only (a crash at a named step of a commit, in a real server process): a `fault_point` step name, at
# which a store built without a `fault` hook ends the process at once, as a kill would
EXIT_AT_ENV = "RECORDS_DESTINATION_EXIT_AT"
EXIT_AT_CODE = 86


def _exit_at_named_step(step: str) -> None:
    if os.environ.get(EXIT_AT_ENV) == step:
        os._exit(EXIT_AT_CODE)


class TableStore:
    """A root's versioned tables, for one writer: reading, writing through the commit protocol, repair, drop and
    retention."""

    def __init__(self, storage: Storage, retention: Retention | None = None, fault: FaultHook | None = None,
                 claim_lease_seconds: float = CLAIM_LEASE_SECONDS,
                 observer: Callable[[CommitEvent], None] | None = None, *, layout: str = COMPLETE,
                 copies: Copies | None = None, publish: Publisher | None = None,
                 dropped: Callable[[str, str], None] | None = None) -> None:
        """`layout`: how new versions hold their unchanged files (destination/on_disk/options.py); every
        version is read whichever layout wrote it. `copies`: how a large S3 carry-forward is fanned out (None:
        this process's thread pool). `publish`: called after each commit, before retention (the table formats).
        `dropped(schema, table)`: called after a table's files are deleted (the served catalog's index)."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}")
        self.storage = storage
        self._fault = fault or _exit_at_named_step
        self._publisher = publish
        self._dropped = dropped
        self._publish: Publish | None = None
        if publish is not None:
            self._publish = lambda prefix, committed, oldest: publish(self, prefix, committed, oldest)
        self._names = TableNames(storage)
        self._reader = VersionReader(storage, self._names)
        # one writer per store; callers serialise a table's writes (destination/rpc/table_locks.py)
        self._claims = Claims(storage, uuid.uuid4().hex, claim_lease_seconds)
        self._retention = VersionRetention(storage, retention or Retention(), self._claims, self.fault_point)
        self._carry = CarryForward(storage, layout, copies, keep_origin=publish is not None)
        self._commits = Committer(storage, self._names, self._reader, self._claims, self._retention, self._carry,
                                  fault=self.fault_point, observer=observer or (lambda event: None),
                                  publish=self._publish)

    @property
    def retention(self) -> Retention:
        return self._retention.retention

    @property
    def layout(self) -> str:
        return self._carry.layout

    @property
    def writer_id(self) -> str:
        return self._claims.writer_id

    @property
    def claim_lease_seconds(self) -> float:
        return self._claims.lease_seconds

    # ---- reading: loading.py, table_names.py ---------------------------------------------------

    def latest_version_number(self, prefix: str) -> int:
        return self._reader.latest_version_number(prefix)

    def load(self, schema: str, table: str, version: int | None = None) -> TableVersion | None:
        """The given version (IncompleteVersion if it lacks files), or the newest complete one."""
        return self._reader.load(schema, table, version)

    def list_schemas(self) -> list[str]:
        return self._names.list_schemas()

    def list_tables(self, schema: str) -> list[str]:
        return self._names.list_tables(schema)

    def table_prefix(self, schema: str, table: str) -> str:
        """The table's folder (TableNames.table_prefix)."""
        return self._names.table_prefix(schema, table)

    # ---- writing: commit.py ------------------------------------------------------------------

    def begin(self, schema: str, table: str, *, checked: TableVersion | None = None,
              after: Attempt | None = None) -> Attempt:
        """An attempt at the table's next version: claimed, on its base (Committer.begin)."""
        return self._commits.begin(schema, table, checked=checked, after=after)

    def commit(self, attempt: Attempt, pending: PendingVersion,
               batch: RequestIdentity | None = None) -> TableVersion | None:
        """Commit `pending` as the attempt's version; None: a conflict, begin again `after` it (Committer.commit)."""
        return self._commits.commit(attempt, pending, batch)

    def abandon(self, attempt: Attempt) -> None:
        """Undo an attempt that commits nothing (Committer.abandon)."""
        self._commits.abandon(attempt)

    def held(self, attempt: Attempt) -> AbstractContextManager[None]:
        """The writer's work on an attempt: an exception abandons it (Committer.held)."""
        return self._commits.held(attempt)

    def repair(self, schema: str, table: str) -> Repair | None:
        """Commit the newest complete version again when the latest one is incomplete (Committer.repair)."""
        return self._commits.repair(schema, table)

    def drop(self, schema: str, table: str) -> None:
        """Remove a table entirely (Migrate drop_table, replacing a copy target)."""
        if self._publisher is not None:
            self._publisher.dropped(self, schema, table)
        self.storage.delete_prefix(self.table_prefix(schema, table))
        self._retention.forget(self.table_prefix(schema, table))
        self._reader.forget(self.table_prefix(schema, table))
        if self._dropped is not None:
            self._dropped(schema, table)

    def publish_latest(self, latest: TableVersion) -> None:
        """Run the `publish` hook (and retention) on the latest committed version, as after its commit: a writer
        that died between its records commit and the hook's work (or a catalog outage) left them behind, and a
        retried request answered "already applied" commits nothing that would catch them up."""
        publish = self._publish
        if publish is not None:
            self.collect_garbage(latest.prefix, latest.version,
                                 before_retiring=lambda oldest: publish(latest.prefix, latest, oldest))

    def fault_point(self, step: str) -> None:
        """A named step of a commit's work, where tests inject a crash (the store's `fault` hook)."""
        self._fault(step)

    # ---- retention: retention.py -------------------------------------------------------------

    def collect_garbage(self, prefix: str, latest: int,
                        before_retiring: Callable[[int], bool] | None = None) -> list[str]:
        """Retire old versions and delete uncommitted leftovers (VersionRetention.collect_garbage); returns the
        version directories retired or deleted."""
        return self._retention.collect_garbage(prefix, latest, before_retiring)

    def commit_record(self, prefix: str, n: int) -> dict[str, Any]:
        return self._retention.commit_record(prefix, n)

    def record_of(self, version: TableVersion) -> dict[str, Any]:
        """`version`'s commit record: the one this process wrote when it committed the version last (no read), else
        read ({} when it is not there)."""
        written = self._reader.written_record(version)
        return written if written is not None else self.commit_record(version.prefix, version.version)
