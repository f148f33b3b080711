"""A change of one step (a definition, a copy, a placement, a truncate, a records format move): what `produce(base,
target)` returns is committed as the table's next version, produced again on the new base after a conflict. The
store only begins, commits and abandons attempts; this loop is the write's (a request's merge takes the same steps
in destination/write/table_writes.py)."""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from destination.store.versions import Attempt, PendingVersion, RequestIdentity, TableVersion, VersionTarget

# (the version it builds on, or None for a new table; the version to fill) -> the version to commit, None: no change
Produce = Callable[[TableVersion | None, VersionTarget], PendingVersion | None]


class Commits(Protocol):
    """What commits an attempt: the store itself (TableStore), or with change files completed first
    (CommitsWithChanges)."""

    def begin(self, schema: str, table: str, *, checked: TableVersion | None = None,
              after: Attempt | None = None) -> Attempt: ...

    def commit(self, attempt: Attempt, pending: PendingVersion,
               batch: RequestIdentity | None = None) -> TableVersion | None: ...

    def abandon(self, attempt: Attempt) -> None: ...

    def held(self, attempt: Attempt) -> AbstractContextManager[None]: ...


def commit_one_step(commits: Commits, schema: str, name: str, produce: Produce) -> TableVersion | None:
    """Commit what `produce` returns as `name`'s next version (None: nothing to change, the latest version is
    returned), beginning again on the new base after each conflict (CommitConflict after the store's last attempt)."""
    attempt = commits.begin(schema, name)
    while True:
        with commits.held(attempt):
            pending = produce(attempt.base, attempt.target)
        if pending is None:
            commits.abandon(attempt)
            return attempt.base
        committed = commits.commit(attempt, pending)
        if committed is not None:
            return committed
        attempt = commits.begin(schema, name, after=attempt)
