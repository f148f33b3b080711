"""A table change's commit: a pending version becomes the table's next, with its change files completed first when
change files are on (the store writes them before its commit record)."""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager

from destination.changes.change_settings import ChangeSettings
from destination.changes.files import STAGING, write_empty
from destination.changes.metadata import (
    KIND_ROWS,
    KIND_SNAPSHOT,
    ZERO_TOTALS,
    ChangeFile,
    ChangeSet,
    change_set,
)
from destination.runtime import phases
from destination.store.table_store import TableStore
from destination.store.versions import Attempt, PendingVersion, RequestIdentity, TableVersion, VersionTarget
from destination.write.jobs import JobRunner
from spark_jobs.contracts import FormatChangesUnit, SnapshotChangesUnit
from spark_jobs.tasks.per_file import format_changes_task, snapshot_changes_task


class CommitsWithChanges:
    """Commits versions through the store, completing their change files first."""

    def __init__(self, store: TableStore, jobs: JobRunner, changes: ChangeSettings) -> None:
        self.store = store
        self._jobs = jobs
        self._changes = changes

    def commit(self, attempt: Attempt, pending: PendingVersion,
               batch: RequestIdentity | None = None) -> TableVersion | None:
        """Complete the version's change files (when on), then commit it (TableStore.commit; None: a conflict)."""
        if self._changes.enabled:
            with self.store.held(attempt):
                pending.changes = self._complete_changes(attempt.schema, attempt.base, attempt.target, pending)
        return self.store.commit(attempt, pending, batch)

    def begin(self, schema: str, table: str, *, checked: TableVersion | None = None,
              after: Attempt | None = None) -> Attempt:
        """An attempt at the table's next version (TableStore.begin)."""
        return self.store.begin(schema, table, checked=checked, after=after)

    def abandon(self, attempt: Attempt) -> None:
        self.store.abandon(attempt)

    def held(self, attempt: Attempt) -> AbstractContextManager[None]:
        return self.store.held(attempt)

    def _complete_changes(self, schema: str, base: TableVersion | None, target: VersionTarget,
                          pending: PendingVersion) -> ChangeSet:
        """Snapshot a version whose tasks wrote no change files; format staged Arcion events with their running
        totals (a second job: the totals of a bucket depend on the buckets before it); describe the directory."""
        table = pending.table
        parts = pending.change_parts
        if parts is None:  # the version's files came without a Spark task (a table copy, a new empty table)
            units = [SnapshotChangesUnit(directory=target.directory, file=f) for f in pending.new_files if f.rows]
            if base is not None:
                units += [SnapshotChangesUnit(directory=base.directory, file=f) for f in pending.carried if f.rows]
            parts = self._jobs.run(snapshot_changes_task, schema, base, target, table, units,
                                   f"snapshot changes {schema}.{table.name}").change_parts(KIND_SNAPSHOT)
        before = dict(base.change_totals) if base else {}
        files: Sequence[ChangeFile] = parts.files
        if parts.kind == KIND_ROWS and self._changes.is_arcion and files:
            running = {k: before.get(k, 0) for k in ZERO_TOTALS}
            staged = []
            for part in files:
                staged.append(FormatChangesUnit(part=part, totals_before=dict(running)))
                for k, v in part.counts.items():
                    running[k] = running.get(k, 0) + v
            files = self._jobs.run(format_changes_task, schema, base, target, table, staged,
                                   f"format changes {schema}.{table.name}", KIND_ROWS).changes
            self.store.storage.delete_prefix(f"{target.changes_directory}/{STAGING}")
        if not files:
            with phases.timed("change_files"):
                files = [write_empty(self.store.storage, self._jobs.change_target(schema, target, parts.kind), table)]
        return change_set(schema, table, self._changes, parts.kind, target.version, int(target.timestamp * 1_000_000),
                          files, before, parts.noop_updates)
