"""Committing a table's next version atomically: the commit protocol around a writer's work.

Commit protocol (docs/ARCHITECTURE.md has the full story):
1. Load: read `_latest` (a hint), then step forward while `_log/<N+1>.json` exists (or start from the version the
   request loaded, while `_latest` still names it: checked beside step 2's claim).
2. Claim: create `_log/<N+1>.claim` if absent, so that only one writer fills `v<N+1>/`.
   A claim left by a crashed writer (ours from an earlier failed attempt, a dead pid
   on this host, or older than the lease) is taken over by creating, if absent, the claim's
   next generation `_log/<N+1>.claim.<k+1>` (k: the highest generation there). Of several writers
   taking over one claim only the one that creates it holds the version, and only it clears `v<N+1>/`.
3. The caller writes its new data files into `v<N+1>/` (Spark tasks do this).
4. Carry unchanged files forward (complete layout: hard link / S3 server-side copy; referencing layout: list them
   where they are), write `_schema.json`, `_schema`, `_format_<records format>`, `_files.json`, `_table.json`, then
   `_manifest` last.
5. Commit: check that this writer still holds the highest claim generation and that every file the
   manifests list is there, then create `_log/<N+1>.json` if absent. Only now is the version visible.
6. Point `_latest` at it and drop the claim's generations, beside the table formats' commits and retention (a data
   file goes only when no retained version lists it).
If the base moved (someone committed N+1 first, or took the claim over) the caller's work is redone on the new
base; an attempt never clears a directory it no longer holds or that is committed. A committed version found
incomplete anyway is skipped by readers (`load` falls back to the newest complete one), refused as a write's
base (IncompleteVersion, a Task naming `records-destination repair`), and `repair` commits a new version
holding the newest complete version's files.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from destination.changes.metadata import ChangeSet
from destination.model import field_ids
from destination.on_disk import layout, records
from destination.on_disk.datafiles import DataFile, empty_table, write_data_file
from destination.on_disk.locations import file_path
from destination.records_formats.codec import table_codec
from destination.runtime import logs, phases
from destination.runtime.errors import CommitConflict, StorageError, UserActionRequired, WriteAbandoned
from destination.runtime.pools import side_by_side, start
from destination.storage.base import Storage
from destination.store.carry import CarryForward
from destination.store.claims import Claims
from destination.store.loading import VersionReader, version_of
from destination.store.retention import VersionRetention
from destination.store.table_names import TableNames
from destination.store.versions import (
    SHOWN_MISSING,
    Attempt,
    ClaimRefused,
    CommitEvent,
    FaultHook,
    IncompleteVersion,
    LostClaim,
    PendingVersion,
    Repair,
    RequestIdentity,
    TableVersion,
    VersionTarget,
)

CLAIM_WAIT_SECONDS = 600.0
MAX_ATTEMPTS = 8
HOUSEKEEPING_THREADS = 8  # a commit's hint and claim clean-ups at once, for all requests of the process
RECENT_BATCHES = 20  # batch ids remembered per table to recognise a retried request
RECHECK_AFTER_SECONDS = 1.0  # the claim is checked again before the metadata when the files took longer than this

Publish = Callable[[str, TableVersion, int], bool]  # Publisher, given the store


class Committer:
    """Writes a table's versions through the commit protocol: an attempt claims the next version on its base
    (`begin`), the writer fills it, and `commit` writes carry-forward, metadata, the commit record, then what follows
    it (`AfterCommit`); `abandon` undoes an attempt that commits nothing."""

    def __init__(self, storage: Storage, names: TableNames, reader: VersionReader, claims: Claims,
                 retention: VersionRetention, carry_forward: CarryForward, *, fault: FaultHook,
                 observer: Callable[[CommitEvent], None], publish: Publish | None) -> None:
        self.storage = storage
        self._names = names
        self._reader = reader
        self._claims = claims
        self._retention = retention
        self._carry_forward = carry_forward
        self._fault = fault
        self._observer = observer
        self._after = AfterCommit(storage, claims, retention, fault=fault, publish=publish)

    def begin(self, schema: str, table: str, *, checked: TableVersion | None = None,
              after: Attempt | None = None) -> Attempt:
        """An attempt at the table's next version, claimed, its base loaded (IncompleteVersion if the latest
        committed version lacks files). `after`: the previous attempt of this write, whose commit conflicted
        (CommitConflict once MAX_ATTEMPTS have); `checked`: the table's latest version as the caller loaded it
        during this request (`_begin`)."""
        return self._begin(schema, table, self._reader.load_version, checked, after)

    def commit(self, attempt: Attempt, pending: PendingVersion, batch: RequestIdentity | None = None) -> TableVersion | None:
        """Commit `pending` (its data files in attempt.target.directory, its change files completed) as the
        attempt's version, recording `batch`'s identity; None: another writer committed first or took the claim
        over, nothing was committed and the attempt is abandoned (the write begins again `after` it). What follows
        the commit record (`_latest`, formats, retention) runs before it returns; a failure there is raised with the
        version committed."""
        schema, prefix, base, target = attempt.schema, attempt.prefix, attempt.base, attempt.target
        with self.held(attempt):
            try:
                self._fault("after_data_files")
                with phases.timed("commit"):
                    committed = self._commit(schema, prefix, base, target.version, attempt.claim, pending,
                                             batch.value if batch is not None else None, target.timestamp)
            except CommitConflict as conflict:  # nothing committed: the write begins again on a fresh base
                self._abandon(prefix, target.version, attempt.claim)
                attempt.conflicts.append(conflict)
                return None
        try:
            with phases.timed("commit"):
                self._after.finish(prefix, committed)
        except Exception as exc:  # a catalog fault after the commit: the version stands, reported below
            followed: Exception | None = exc
        else:
            followed = None
        carried = {f.name for f in pending.carried}
        written = tuple(f for f in committed.files if f.name not in carried)
        self._observer(CommitEvent(schema, attempt.table, committed, written,
                                   sum(1 for f in base.files if f.name not in carried) if base else 0,
                                   len(attempt.conflicts) + 1, len(attempt.conflicts)))
        if followed is not None:
            raise followed
        return committed

    def abandon(self, attempt: Attempt) -> None:
        """Undo an attempt that commits nothing (the writer found nothing to change, or gave up)."""
        self._abandon(attempt.prefix, attempt.target.version, attempt.claim)

    @contextmanager
    def held(self, attempt: Attempt) -> Iterator[None]:
        """The writer's work on an attempt: an exception abandons it (a thread pool refusing work as the process
        exits becomes WriteAbandoned)."""
        try:
            yield
        except RuntimeError as exc:  # a thread pool of the write (CSV read-ahead, ...) refused work at exit
            self.abandon(attempt)
            abandoned = _abandoned_by_shutdown(exc)
            if abandoned is None:
                raise
            raise abandoned from None
        except Exception:
            self.abandon(attempt)
            raise

    def repair(self, schema: str, table: str) -> Repair | None:
        """When the latest committed version is incomplete, commit the newest complete version's files (and
        definition) as a new version. None: the latest version is complete, nothing to do. The incomplete
        versions' rows are not restored (their files are gone): the table needs a re-sync afterwards."""
        latest = self._reader.latest_version_number(self._names.table_prefix(schema, table))
        if latest == 0:
            raise UserActionRequired(f"table {schema}.{table} has no committed version in {self.storage.spec.root}")
        try:
            self._reader.load_version(schema, table, latest)
            return None
        except IncompleteVersion:
            pass
        if self._reader.last_complete(schema, table, latest) is None:
            raise UserActionRequired(f"no committed version of {schema}.{table} is complete: nothing to restore; "
                                     f"drop the table (delete its directory) and re-sync it")
        attempt = self._begin(schema, table, self._reader.last_complete, None, None)
        while True:
            restored = attempt.base
            assert restored is not None
            committed = self.commit(attempt, PendingVersion(restored.table, [], list(restored.files), {
                "kind": "repair", "restored_version": restored.version,
                "incomplete_versions": list(range(restored.version + 1, attempt.target.version))}))
            if committed is not None:
                return Repair(tuple(range(restored.version + 1, committed.version)), restored.version,
                              committed.version)
            attempt = self._begin(schema, table, self._reader.last_complete, None, attempt)

    def _begin(self, schema: str, table: str, load_base: Callable[[str, str, int], TableVersion | None],
               checked: TableVersion | None, after: Attempt | None) -> Attempt:
        """Claim the version after the latest and load its base with `load_base(schema, table, n)`.

        `checked`, the latest version the caller loaded during this request (its files listed then), is the
        base while the reader still keeps it as the table's latest and `_latest`, read beside the claim, still
        names it (number and commit time: the table dropped and made again elsewhere names another): no stepping
        through the log and no second listing, and on S3 one round trip for the check instead of three. The claim
        on the version after it finds a commit made since. Either sends the claim back to a fresh read; that is not
        a conflict. A claim held by another live writer is waited for, up to CLAIM_WAIT_SECONDS for the write."""
        prefix = self._names.table_prefix(schema, table)
        if after is None:
            self._names.keep_full_names(schema, table, prefix)
        conflicts = after.conflicts if after is not None else []
        deadline = after.deadline if after is not None else time.monotonic() + CLAIM_WAIT_SECONDS
        known = checked if checked is not None and self._reader.is_latest_known(checked) else None
        while len(conflicts) < MAX_ATTEMPTS:
            base_n = known.version if known is not None else self._reader.latest_version_number(prefix)
            target = base_n + 1
            with phases.timed("commit"):
                claim, still_latest = self._claim(prefix, target, known)
            if not still_latest:  # a commit since the caller's load, or the table made again: read afresh
                if not isinstance(claim, ClaimRefused):
                    self._abandon(prefix, target, claim)
                known = None
                continue
            if claim is ClaimRefused.COMMITTED:  # version taken by a commit: begin again on the new base
                conflicts.append(CommitConflict(f"version {target} was committed by another writer"))
                continue
            if claim is ClaimRefused.BUSY:  # another live writer is preparing it
                if time.monotonic() > deadline:
                    raise CommitConflict(f"{prefix!r}: another writer has been preparing version {target} for too long")
                time.sleep(0.2)
                continue
            spot = VersionTarget(target, layout.version_dir(prefix, target), layout.changes_dir(prefix, target),
                                 time.time())
            attempt = Attempt(schema, table, prefix, None, spot, claim, conflicts, deadline)
            with self.held(attempt), phases.timed("load"):
                attempt.base = known if known is not None else load_base(schema, table, base_n) if base_n else None
            return attempt
        self._observer(CommitEvent(schema, table, None, attempts=len(conflicts), conflicts=len(conflicts)))
        raise CommitConflict(f"{prefix!r}: gave up after {len(conflicts)} commit conflicts (last: {conflicts[-1]})")

    def _claim(self, prefix: str, target: int, known: TableVersion | None) -> tuple[int | ClaimRefused, bool]:
        """The claim on `target`, and whether `known` (if given) is still the table's latest: `_latest` names it,
        read beside the claim, and the claim finds no commit of `target`."""
        if known is None:
            return self._claims.claim(prefix, target), True
        claimed: list[int | ClaimRefused] = []
        named: list[bool] = []
        side_by_side("commit-checks", HOUSEKEEPING_THREADS, [
            lambda: claimed.append(self._claims.claim(prefix, target)),
            lambda: named.append(self._reader.latest_names(known))])
        return claimed[0], named[0] and claimed[0] is not ClaimRefused.COMMITTED

    def _commit(self, schema: str, prefix: str, base: TableVersion | None, target: int, generation: int,
                pending: PendingVersion, batch_id: str | None, committed_at: float) -> TableVersion:
        s = self.storage
        directory = layout.version_dir(prefix, target)
        # the version's directories are shared with whoever takes the claim over: a writer that outlived its claim
        # (another committed the version meanwhile) must not write its metadata over the committed version's
        try:
            self._check_claim(prefix, target, generation)
        except LostClaim:  # its new files (names of its own) go too: a directory reader would take them for rows
            for f in pending.new_files:
                s.delete(file_path(directory, f))
            raise
        checked = time.monotonic()
        if pending.changes is not None:
            with phases.timed("change_files"):
                self._write_changes(prefix, target, pending.changes)
        carried = [f for f in pending.carried if f.rows > 0]
        if base is not None:
            carried = self._carry_forward.carry(base, pending.table, target, carried)
        files = [f for f in [*carried, *pending.new_files] if f.rows > 0]
        if not files:  # an empty table is one zero-row data file (Redshift COPY needs a file)
            files = [write_data_file(s, directory, layout.data_file_name(None), empty_table(pending.table),
                                     pending.table, None)]
        totals = pending.changes.totals if pending.changes is not None else dict(base.change_totals if base else {})
        recent = (*(base.recent_batches if base else ()), *((batch_id,) if batch_id else ()))[-RECENT_BATCHES:]
        if time.monotonic() - checked > RECHECK_AFTER_SECONDS:  # a long carry-forward (S3 copies): again
            self._check_claim(prefix, target, generation)
        with phases.timed("metadata"):
            schema_doc = records.dumps(records.schema_json(pending.table))
            codec = table_codec(pending.table)
            files_doc = records.dumps({"files": [f.to_json() for f in files]})
            table_doc = records.dumps({
                "schema": schema, "table": field_ids.assign(pending.table).to_json(), "version": target,
                "committed_at": committed_at, "recent_batches": list(recent), "change_totals": totals})
            s.write_all([
                (f"{directory}/{records.SCHEMA_JSON}", schema_doc),
                (f"{directory}/{records.SCHEMA_LEGACY}", schema_doc),
                (f"{directory}/{codec.format_file}", codec.format_content()),
                (f"{directory}/{records.FILES_JSON}", files_doc),
                (f"{directory}/{records.TABLE_JSON}", table_doc)])
            s.write_bytes(f"{directory}/{records.MANIFEST}", records.dumps(  # last, once the rest is written
                records.manifest_json([(s.url(file_path(directory, f)), f.bytes) for f in files])))
        # every name the record will stand for (data files, carried links, metadata, change files, the folders
        # themselves) made durable first: on a local disk a crash must not keep the record without them
        s.sync_directories(_folders_of_version(prefix, target, pending.changes is not None, first=base is None))
        self._fault("before_commit_record")
        # files listed where an earlier version wrote them were checked when the base loaded, and retention keeps
        # every file the latest version lists; only a base older than the latest (a repair) is checked again
        on_base = base is not None and base.version == target - 1
        self._check_before_commit(prefix, target, generation,
                                  [f for f in files if f.stored_in is None] if on_base else files, pending.changes,
                                  codec.format_file)
        record = {"version": target, "directory": layout.version_dir_name(target), "committed_at": committed_at,
                  "operation": pending.operation, "batch_id": batch_id, "writer": self._claims.writer_id,
                  "base": base.version if base is not None else 0, "layout": self._carry_forward.layout}
        if pending.changes is not None:
            record["changes"] = {"directory": f"changes/{layout.version_dir_name(target)}", **pending.changes.summary}
        if not s.create_exclusive(layout.log_path(prefix, target), records.dumps(record)):
            raise LostClaim(f"{prefix!r}: version {target} was committed by another writer during this write")
        # the version as a load reads it, from the documents just written: the next write's base, with no reads
        self._reader.remember(version_of(schema, prefix, target, json.loads(table_doc), json.loads(files_doc)), record)
        self._fault("after_commit_record")
        return TableVersion(schema=schema, version=target, table=pending.table, files=tuple(files), prefix=prefix,
                            committed_at=committed_at, recent_batches=recent, change_totals=totals)

    def _check_claim(self, prefix: str, target: int, generation: int) -> None:
        if not self._claims.holds(prefix, target, generation):
            raise _lost_claim(prefix, target)

    def _check_before_commit(self, prefix: str, target: int, generation: int, files: list[DataFile],
                             changes: ChangeSet | None, format_file: str) -> None:
        """Only the claim's holder commits, and only a version holding every file its manifests list: the claim's
        and the folders' listings side by side (on S3 one round trip's time)."""
        holds: list[bool] = []
        missing: list[str] = []
        missing_changes: list[str] = []

        def change_files(directory: str, names: list[str]) -> None:
            missing_changes.extend(f"changes/{name}" for name in self._reader.missing_files(directory, names))
        side_by_side("commit-checks", HOUSEKEEPING_THREADS, [
            lambda: holds.append(self._claims.holds(prefix, target, generation)),
            lambda: missing.extend(self._reader.missing_of_version(layout.version_dir(prefix, target), files,
                                                                   format_file)),
            *([partial(change_files, layout.changes_dir(prefix, target),
                       [*changes.metadata, records.MANIFEST, *(name for name, _ in changes.files)])]
              if changes is not None else [])])
        if not holds[0]:
            raise _lost_claim(prefix, target)
        missing += missing_changes
        if missing:
            raise LostClaim(f"{prefix!r}: version {target} lacks {len(missing)} of its files before its commit "
                            f"({', '.join(missing[:SHOWN_MISSING])}); nothing was committed")

    def _abandon(self, prefix: str, target: int, generation: int) -> None:
        """Undo an attempt that committed nothing. Its directory is cleared only while this writer still holds the
        claim and `target` is not committed: after a takeover it belongs to another writer, who may commit it."""
        try:
            if self.storage.exists(layout.log_path(prefix, target)) or not self._claims.holds(prefix, target, generation):
                self.storage.delete(layout.claim_path(prefix, target, generation))
                return
            self._claims.clear_unfinished(prefix, target)
            self._claims.drop(prefix, target)
        except Exception as exc:  # best effort: a leftover is cleaned up by takeover or retention
            logs.warning(f"{prefix}: could not clean up unfinished version {target}: {exc}")

    def _write_changes(self, prefix: str, target: int, changes: ChangeSet) -> None:
        """The change directory's metadata, then its `_manifest` (last, as in every records directory)."""
        s = self.storage
        directory = layout.changes_dir(prefix, target)
        s.write_all([(f"{directory}/{name}", body) for name, body in changes.metadata.items()])
        s.write_bytes(f"{directory}/{records.MANIFEST}", records.dumps(
            records.manifest_json([(s.url(f"{directory}/{name}"), size) for name, size in changes.files])))


class AfterCommit:
    """What follows a commit record: `_latest` and the claims' clean-up, beside the `publish` hook (the table formats)
    and retention."""

    def __init__(self, storage: Storage, claims: Claims, retention: VersionRetention, *, fault: FaultHook,
                 publish: Publish | None) -> None:
        self.storage = storage
        self._claims = claims
        self._retention = retention
        self._fault = fault
        self._publish = publish

    def finish(self, prefix: str, committed: TableVersion) -> None:
        """`_latest` and the claims' clean-up (their failures are warnings), beside the formats and retention."""
        s = self.storage
        latest = records.dumps({"version": committed.version, "directory": layout.version_dir_name(committed.version),
                                "committed_at": committed.committed_at})
        try:
            # the hint and the claims (the base's too: a writer died after its commit) are independent of each
            # other, and of the formats and retention (none of which reads them): all side by side, on S3 the
            # formats' time rather than theirs plus two round trips
            moved: list[bool] = []  # `_latest` named this version: set by the call that wrote it

            def move_latest() -> None:
                self._fault("before_latest")
                s.write_bytes(layout.latest_path(prefix), latest)
                moved.append(True)

            claims = [partial(self._claims.drop, prefix, version) for version in (committed.version - 1, committed.version)]
            calls: list[Callable[[], object]] = [move_latest, *claims]
            housekeeping = start("commit-housekeeping", HOUSEKEEPING_THREADS,
                                 [partial(self._housekeeping, prefix, committed.version, call) for call in calls])

            def latest_moved() -> bool:
                housekeeping.wait()
                return bool(moved)
            try:
                self._publish_and_retain(prefix, committed, latest_moved)
            finally:
                housekeeping.wait()  # its failures are warnings (`_housekeeping`): a failure above stays the one raised
        except StorageError as exc:  # the commit stands; retention is retried next time
            logs.warning(f"{prefix}: version {committed.version} committed; housekeeping failed: {exc}")
        except RuntimeError as exc:  # the server is stopping and its pools take no more work: the commit stands
            if _abandoned_by_shutdown(exc) is None:
                raise
            logs.warning(f"{prefix}: version {committed.version} committed; the server is stopping, so what of "
                         "`_latest`, the claims and the table formats was not done is left to the next write of the table")

    @staticmethod
    def _housekeeping(prefix: str, version: int, call: Callable[[], object]) -> None:
        """`_latest` or a claim's clean-up after the commit of `version`: a failure (storage refusing or unreachable)
        leaves it to the next commit of the table (readers step forward from an old `_latest`; a committed
        version's claim is stale), and never stands in for a failure of the formats beside it."""
        try:
            call()
        except Exception as exc:
            logs.warning(f"{prefix}: version {version} committed; housekeeping failed: {exc}")

    def _publish_and_retain(self, prefix: str, committed: TableVersion, latest_moved: Callable[[], bool]) -> None:
        """The formats (when published) and retention; `_log/` is pruned only once `_latest` names this version, so
        a load, stepping forward from `_latest`, never starts before the records pruning leaves."""
        publish = self._publish
        with phases.timed("retention"):  # the formats' commits, inside it, are phases of their own
            if publish is None:
                self._retention.collect_garbage(prefix, committed.version, may_prune=latest_moved)
            else:
                self._fault("before_table_formats")
                self._retention.collect_garbage(prefix, committed.version,
                                                before_retiring=lambda oldest: publish(prefix, committed, oldest),
                                                may_prune=latest_moved)


def _lost_claim(prefix: str, target: int) -> LostClaim:
    return LostClaim(f"{prefix!r}: another writer took over version {target} while this write prepared it")


def _folders_of_version(prefix: str, target: int, with_changes: bool, first: bool) -> list[str]:
    """The folders where a version's commit created names, deepest first: its directory (and its change files'),
    the table's folder holding them, and, for a table's first version, the folders above the table's up to the
    root."""
    folders = [layout.version_dir(prefix, target)]
    if with_changes:
        folders += [layout.changes_dir(prefix, target), layout.changes_root(prefix)]
    folders.append(prefix)
    if first:
        parts = prefix.split("/")
        folders += ["/".join(parts[:depth]) for depth in range(len(parts) - 1, -1, -1)]
    return folders


def _abandoned_by_shutdown(exc: RuntimeError) -> WriteAbandoned | None:
    """The server's grace period ran out and the interpreter is exiting: concurrent.futures takes no new work
    (its message is the only signal: "cannot schedule new futures after [interpreter] shutdown", the second when a
    pool's worker saw the exit first). The caller removes the uncommitted version."""
    if "cannot schedule new futures after" not in str(exc):
        return None
    return WriteAbandoned("write abandoned: the server is stopping and its grace period ran out before the "
                          "version was committed; nothing was committed, retry the request")
