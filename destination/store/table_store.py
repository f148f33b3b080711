"""The table store: load the latest committed version, and commit a new one atomically.

Commit protocol (docs/ARCHITECTURE.md has the full story):
1. Load: read `_latest` (a hint), then step forward while `_log/<N+1>.json` exists.
2. Claim: create `_log/<N+1>.claim` if absent, so that only one writer fills `v<N+1>/`.
   A claim left by a crashed writer (ours from an earlier failed attempt, a dead pid
   on this host, or older than the lease) is taken over by creating, if absent, the claim's
   next generation `_log/<N+1>.claim.<k+1>` (k: the highest generation there). Of several writers
   taking over one claim only the one that creates it holds the version, and only it clears `v<N+1>/`.
3. The caller writes its new data files into `v<N+1>/` (Spark tasks do this).
4. Carry unchanged files forward (complete layout: hard link / S3 server-side copy; referencing layout: list them
   where they are), write `_schema.json`, `_schema`, `_format_parquet`, `_files.json`, `_table.json`, then
   `_manifest` last.
5. Commit: check that this writer still holds the highest claim generation and that every file the
   manifests list is there, then create `_log/<N+1>.json` if absent. Only now is the version visible.
6. Point `_latest` at it, drop the claim's generations, and apply retention (a data file goes only when no
   retained version lists it).
If the base moved (someone committed N+1 first, or took the claim over) the caller's work is redone on the new
base; an attempt never clears a directory it no longer holds or that is committed. A committed version found
incomplete anyway is skipped by readers (`load` falls back to the newest complete one), refused as a write's
base (IncompleteVersion, a Task naming `records-destination repair`), and `repair` commits a new version
holding the newest complete version's files.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol, TypeVar

from destination.shared import field_ids, logs, phases
from destination.shared.changes.metadata import ChangeParts, ChangeSet
from destination.shared.errors import CommitConflict, StorageError, UserActionRequired, WriteAbandoned
from destination.shared.on_disk import layout, records
from destination.shared.on_disk.datafiles import DataFile, empty_table, write_data_file
from destination.shared.on_disk.locations import file_dir, file_path, held_paths
from destination.shared.on_disk.naming import NAME_OBJECT, decode_name, is_shortened
from destination.shared.on_disk.options import COMPLETE, LAYOUTS, REFERENCING
from destination.shared.on_disk.options import Retention as Retention  # re-exported: callers build stores with it
from destination.shared.storage.base import Storage, StorageSpec
from destination.shared.table_model import TableDef

CLAIM_LEASE_SECONDS = 1800.0
CLAIM_WAIT_SECONDS = 600.0
MAX_ATTEMPTS = 8
COPY_THREADS = 8  # concurrent server-side copies (boto3's connection pool holds 10)
FAN_OUT_COPIES = 64  # a carry-forward of at least this many S3 files runs as a Spark job of copy tasks (`Copies`)
RECENT_BATCHES = 20  # batch ids remembered per table to recognise a retried request

FaultHook = Callable[[str], None]
VERSION_METADATA = (*records.METADATA_FILES, records.MANIFEST)
# retiring a version removes its metadata in this order: `_manifest` first (no reader takes it for a records
# directory any more), `_files.json` last (its list of data files is what retention reads, so a retirement that
# stopped half-way is redone by the next one)
RETIRE_ORDER = (records.MANIFEST, *(m for m in records.METADATA_FILES if m != records.FILES_JSON), records.FILES_JSON)
SHOWN_MISSING = 3  # missing files named in a message
R = TypeVar("R")


class ClaimRefused(Enum):
    """Why a writer holds no claim on the version it tried."""

    COMMITTED = "the version is committed"
    BUSY = "a live writer holds the claim"


class LostClaim(CommitConflict):
    """The version this writer prepared cannot be committed by it (its claim was taken over, or files it wrote
    are gone); nothing was committed and the write is redone."""


class IncompleteVersion(StorageError):
    """A committed version lacks files its metadata lists: reads fall back, writes need `repair` first."""

    def __init__(self, storage: Storage, schema: str, table: str, version: int, missing: list[str]) -> None:
        shown = ", ".join(missing[:SHOWN_MISSING]) + (" …" if len(missing) > SHOWN_MISSING else "")
        super().__init__(
            f"version {version} of {schema}.{table} is committed but {len(missing)} of its files are missing "
            f"({shown}). Run `records-destination repair {schema}.{table} --root {storage.spec.root}` to commit the "
            f"newest complete version again as the latest, then re-sync the table (the rows of the incomplete "
            f"versions are not in it)")
        self.version = version
        self.missing = missing


@dataclass(frozen=True)
class Repair:
    """What `TableStore.repair` did: the incomplete versions, the version restored, and the version committed."""

    incomplete: tuple[int, ...]
    restored: int
    version: int


class FollowCommit(Protocol):
    """Brings a table's other formats (Delta Lake, Iceberg: destination/table_formats/sync.py) up to the version
    just committed, telling them the oldest version retention keeps. False: a format could not follow (logged);
    retention then waits, since a format's latest entry may still reference the files it would delete."""

    def __call__(self, store: TableStore, prefix: str, committed: TableVersion, oldest_retained: int) -> bool: ...

    def dropped(self, store: TableStore, schema: str, table: str) -> None:
        """The table is about to be dropped (its catalog entry goes first: destination/catalogs/follow.py)."""


class RequestIdentity(Protocol):
    """A write request's identity, recorded with the version it commits so that its retry is recognised
    (destination/write/batches.py's BatchIdentity)."""

    def seen_in(self, recent: Sequence[str]) -> bool:
        """Whether one of the identities recorded by the latest versions is this request's."""
        ...

    @property
    def value(self) -> str:
        """What the version records."""
        ...


class Copies(Protocol):
    """Copies (source, target) pairs of storage paths (in the storage of `spec`) for the version being written
    (`table`, `directory`, `version`); the write layer passes one that fans them out over Spark's executors
    (destination/write/copy_job.py)."""

    def __call__(self, spec: StorageSpec, table: TableDef, directory: str, version: int,
                 pairs: Sequence[tuple[str, str]]) -> None: ...


@dataclass(frozen=True)
class TableVersion:
    """One committed version: its definition and its data files."""

    schema: str
    version: int
    table: TableDef
    files: tuple[DataFile, ...]
    prefix: str
    committed_at: float = 0.0
    recent_batches: tuple[str, ...] = ()
    change_totals: dict[str, int] = field(default_factory=dict)  # running operation totals of the change files

    @property
    def directory(self) -> str:
        return layout.version_dir(self.prefix, self.version)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass(frozen=True)
class VersionTarget:
    """The version a writer prepares: where its files go and its timestamp (also its changes' commit time)."""

    version: int
    directory: str  # v<N>/
    changes_directory: str  # changes/v<N>/
    timestamp: float  # seconds since the epoch; recorded as the version's committed_at


@dataclass
class PendingVersion:
    """What a writer produced for version N+1, before commit."""

    table: TableDef
    new_files: list[DataFile]
    carried: list[DataFile]
    operation: dict[str, Any]
    # with change files on: what the tasks wrote into the change directory (None: nothing yet, the writer
    # snapshots the version's files), and the completed directory (written by the store before the commit record)
    change_parts: ChangeParts | None = None
    changes: ChangeSet | None = None


@dataclass(frozen=True)
class CommitEvent:
    """What one write of a table did, for metrics and the status page (`TableStore(observer=…)`)."""

    schema: str
    table: str
    committed: TableVersion | None  # None: gave up after commit conflicts
    new_files: tuple[DataFile, ...] = ()  # written for this version (its files not carried from the base)
    rewritten: int = 0  # base files replaced (not carried)
    attempts: int = 1
    conflicts: int = 0


class AlreadyApplied(Exception):
    """The batch being written was committed earlier (a retried request)."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


class TableStore:
    def __init__(self, storage: Storage, retention: Retention | None = None, fault: FaultHook | None = None,
                 claim_lease_seconds: float = CLAIM_LEASE_SECONDS,
                 observer: Callable[[CommitEvent], None] | None = None, *, layout: str = COMPLETE,
                 copies: Copies | None = None, follow: FollowCommit | None = None) -> None:
        """`layout`: how new versions hold their unchanged files (destination/shared/on_disk/options.py); every
        version is read whichever layout wrote it. `copies`: how a large S3 carry-forward is fanned out (None:
        this process's thread pool). `follow`: called after each commit, before retention (the table formats)."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}")
        self.storage = storage
        self._observer = observer or (lambda event: None)
        self.retention = retention or Retention()
        self.layout = layout
        self._copies = copies
        self._follow = follow
        self._fault = fault or (lambda step: None)
        self.writer_id = uuid.uuid4().hex  # one writer per store; callers serialise a table's writes (TableLocks)
        self.claim_lease_seconds = claim_lease_seconds

    # ---- reading ---------------------------------------------------------------------------

    def latest_version_number(self, prefix: str) -> int:
        n = 0
        try:
            n = int(json.loads(self.storage.read_bytes(layout.latest_path(prefix)))["version"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError):
            logs.warning(f"{prefix}: unreadable _latest; finding the latest version from the commit log")
        while self.storage.exists(layout.log_path(prefix, n + 1)):
            n += 1
        return n

    def load(self, schema: str, table: str, version: int | None = None) -> TableVersion | None:
        """The given version (IncompleteVersion if it lacks files), or the newest complete one."""
        with phases.timed("load"):
            if version is not None:
                return self._load_version(schema, table, version) if version else None
            return self._last_complete(schema, table, self.latest_version_number(self.table_prefix(schema, table)))

    def _last_complete(self, schema: str, table: str, n: int) -> TableVersion | None:
        """The newest complete version at or below n: a table whose latest committed version is incomplete stays
        readable (writes refuse it as their base until `repair`)."""
        while n > 0:
            try:
                return self._load_version(schema, table, n)
            except IncompleteVersion as incomplete:
                logs.warning(f"{schema}.{table}: version {n} is committed but {len(incomplete.missing)} of its files "
                             f"are missing; reading version {n - 1} instead. Run `records-destination repair "
                             f"{schema}.{table}` to repair the table")
                n -= 1
        return None

    def _load_version(self, schema: str, table: str, n: int) -> TableVersion | None:
        """Version n; None if it was never committed; IncompleteVersion if committed but lacking a file."""
        prefix = self.table_prefix(schema, table)
        directory = layout.version_dir(prefix, n)
        try:
            meta = json.loads(self.storage.read_bytes(f"{directory}/{records.TABLE_JSON}"))
            files = json.loads(self.storage.read_bytes(f"{directory}/{records.FILES_JSON}"))
        except FileNotFoundError:
            return self._uncommitted(schema, table, n, self._missing_files(directory, VERSION_METADATA))
        definition = TableDef.from_json(meta["table"])
        if not definition.field_ids:
            definition = self._ids_of_before(prefix, definition)
        loaded = TableVersion(
            schema=schema, version=n, table=definition,
            files=tuple(DataFile.from_json(f) for f in files["files"]), prefix=prefix,
            committed_at=float(meta.get("committed_at", 0.0)),
            recent_batches=tuple(meta.get("recent_batches", ())),
            change_totals=dict(meta.get("change_totals", {})),
        )
        missing = self._missing_of_version(directory, loaded.files)
        return self._uncommitted(schema, table, n, missing) if missing else loaded

    def _ids_of_before(self, prefix: str, table: TableDef) -> TableDef:
        """A table committed before field ids were kept: the ids of its Iceberg metadata, where it has one (files
        are then written with the ids its snapshots and name mapping already give the columns)."""
        metadata = field_ids.latest_iceberg_metadata(self.storage.read_bytes, prefix)
        return table if metadata is None else field_ids.from_iceberg(table, metadata)

    def _uncommitted(self, schema: str, table: str, n: int, missing: list[str]) -> TableVersion | None:
        """A version lacking files is one still being written (None), unless it is committed (IncompleteVersion)."""
        if self.storage.exists(layout.log_path(self.table_prefix(schema, table), n)):
            raise IncompleteVersion(self.storage, schema, table, n, missing)
        return None

    def _missing_of_version(self, directory: str, files: Sequence[DataFile]) -> list[str]:
        """The version's metadata and data files that are not where it lists them (a file stored in another
        version's directory is named `v<K>/<name>`); one listing per directory."""
        wanted: dict[str, list[str]] = {directory: list(VERSION_METADATA)}
        for f in files:
            wanted.setdefault(file_dir(directory, f), []).append(f.name)
        return [name if folder == directory else f"{folder.rsplit('/', 1)[1]}/{name}"
                for folder, names in wanted.items() for name in self._missing_files(folder, names)]

    def _missing_files(self, directory: str, names: Sequence[str]) -> list[str]:
        """Which of `names` (relative to directory) are not there; one listing, not a lookup per file."""
        present = {o.path[len(directory) + 1:] for o in self.storage.list_recursive(directory)}
        return [name for name in names if name not in present]

    def list_schemas(self) -> list[str]:
        return [self._name_of(n, n) for n in self.storage.list_children("") if not n.startswith((".", "_"))]

    def list_tables(self, schema: str) -> list[str]:
        parent = layout.schema_prefix(schema)
        return [self._name_of(n, f"{parent}/{n}") for n in self.storage.list_children(parent)
                if not n.startswith(".") and n != NAME_OBJECT]

    def _name_of(self, folder: str, prefix: str) -> str:
        """The schema or table name of `folder` (at `prefix`): decoded, or read back when it was shortened."""
        if is_shortened(folder):
            return self.storage.read_bytes(layout.name_object(prefix)).decode("utf-8")
        return decode_name(folder)

    def table_prefix(self, schema: str, table: str) -> str:
        """The table's folder (layout.table_prefix), except that a table S3 holds under the longer folder names
        it was created with, before names over 255 bytes were shortened, keeps that folder."""
        prefix = layout.table_prefix(schema, table)
        if self.storage.spec.is_s3:
            unshortened = layout.unshortened_table_prefix(schema, table)
            if unshortened != prefix and self.storage.exists(layout.latest_path(unshortened)):
                return unshortened
        return prefix

    def _keep_full_names(self, schema: str, table: str, prefix: str) -> None:
        """Store the full name of each shortened folder of the table, once (listing reads them back)."""
        if prefix != layout.table_prefix(schema, table):
            return  # an unshortened folder from before: its names decode
        for path, name in layout.full_name_objects(schema, table).items():
            if not self.storage.exists(path):
                self.storage.write_bytes(path, name.encode("utf-8"))

    # ---- writing ---------------------------------------------------------------------------

    def write(self, schema: str, table: str,
              produce: Callable[[TableVersion | None, VersionTarget], PendingVersion | None],
              *, batch: RequestIdentity | None = None) -> TableVersion | None:
        """Run `produce(base, target)` and commit what it returns as the next version.

        `produce` writes its new data files into target.directory (and any change files into
        target.changes_directory) and returns the pending version, or None when there is nothing
        to change. It is called again on a fresh base if another writer commits first. Raises
        AlreadyApplied for a `batch` committed before; IncompleteVersion if the latest committed version lacks files.
        """
        committed, _ = self.write_with_result(schema, table, lambda base, target: (produce(base, target), None),
                                              batch=batch)
        return committed

    def write_with_result(self, schema: str, table: str,
                          produce: Callable[[TableVersion | None, VersionTarget], tuple[PendingVersion | None, R]],
                          *, batch: RequestIdentity | None = None) -> tuple[TableVersion | None, R]:
        """`write` for a `produce` that also returns a result of its own (its job's counts and timings): handed
        back with the version, from the call that made it (a conflict calls `produce` again on a new base)."""
        return self._write(schema, table, produce, batch, self._load_version)

    def repair(self, schema: str, table: str) -> Repair | None:
        """When the latest committed version is incomplete, commit the newest complete version's files (and
        definition) as a new version. None: the latest version is complete, nothing to do. The incomplete
        versions' rows are not restored (their files are gone): the table needs a re-sync afterwards."""
        latest = self.latest_version_number(self.table_prefix(schema, table))
        if latest == 0:
            raise UserActionRequired(f"table {schema}.{table} has no committed version in {self.storage.spec.root}")
        try:
            self._load_version(schema, table, latest)
            return None
        except IncompleteVersion:
            pass
        if self._last_complete(schema, table, latest) is None:
            raise UserActionRequired(f"no committed version of {schema}.{table} is complete: nothing to restore; "
                                     f"drop the table (delete its directory) and re-sync it")
        def restore(base: TableVersion | None, target: VersionTarget) -> tuple[PendingVersion, int]:
            assert base is not None
            return PendingVersion(base.table, [], list(base.files), {
                "kind": "repair", "restored_version": base.version,
                "incomplete_versions": list(range(base.version + 1, target.version))}), base.version

        committed, restored = self._write(schema, table, restore, None, self._last_complete)
        assert committed is not None
        return Repair(tuple(range(restored + 1, committed.version)), restored, committed.version)

    def _write(self, schema: str, table: str,
               produce: Callable[[TableVersion | None, VersionTarget], tuple[PendingVersion | None, R]],
               batch: RequestIdentity | None,
               load_base: Callable[[str, str, int], TableVersion | None]) -> tuple[TableVersion | None, R]:
        """The commit protocol around `produce`; `load_base(schema, table, n)` reads the base version."""
        prefix = self.table_prefix(schema, table)
        self._keep_full_names(schema, table, prefix)
        deadline = time.monotonic() + CLAIM_WAIT_SECONDS
        conflicts: list[CommitConflict] = []
        while len(conflicts) < MAX_ATTEMPTS:
            base_n = self.latest_version_number(prefix)
            target = base_n + 1
            with phases.timed("commit"):
                claim = self._claim(prefix, target)
            if claim is ClaimRefused.COMMITTED:  # version taken by a commit: redo on the new base
                conflicts.append(CommitConflict(f"version {target} was committed by another writer"))
                continue
            if claim is ClaimRefused.BUSY:  # another live writer is preparing it
                if time.monotonic() > deadline:
                    raise CommitConflict(f"{prefix!r}: another writer has been preparing version {target} for too long")
                time.sleep(0.2)
                continue
            try:
                with phases.timed("load"):
                    base = load_base(schema, table, base_n) if base_n else None
                if batch is not None and base is not None and batch.seen_in(base.recent_batches):
                    raise AlreadyApplied(base.version)
                spot = VersionTarget(target, layout.version_dir(prefix, target), layout.changes_dir(prefix, target),
                                     time.time())
                pending, result = produce(base, spot)
                if pending is None:
                    self._abandon(prefix, target, claim)
                    return base, result
                self._fault("after_data_files")
                with phases.timed("commit"):
                    committed = self._commit(schema, prefix, base, target, claim, pending,
                                             batch.value if batch is not None else None, spot.timestamp)
            except CommitConflict as conflict:  # nothing committed: redo on a fresh base
                self._abandon(prefix, target, claim)
                conflicts.append(conflict)
                continue
            except RuntimeError as exc:  # a thread pool of the write (CSV read-ahead, ...) refused work at exit
                self._abandon(prefix, target, claim)
                abandoned = _abandoned_by_shutdown(exc)
                if abandoned is None:
                    raise
                raise abandoned from None
            except Exception:  # AlreadyApplied included: nothing to commit
                self._abandon(prefix, target, claim)
                raise
            try:
                with phases.timed("commit"):
                    self._finish(prefix, committed)
            except Exception as exc:  # a catalog fault after the commit: the version stands, reported below
                followed: Exception | None = exc
            else:
                followed = None
            carried = {f.name for f in pending.carried}
            written = tuple(f for f in committed.files if f.name not in carried)
            self._observer(CommitEvent(schema, table, committed, written,
                                       sum(1 for f in base.files if f.name not in carried) if base else 0,
                                       len(conflicts) + 1, len(conflicts)))
            if followed is not None:
                raise followed
            return committed, result
        self._observer(CommitEvent(schema, table, None, attempts=len(conflicts), conflicts=len(conflicts)))
        raise CommitConflict(f"{prefix!r}: gave up after {len(conflicts)} commit conflicts (last: {conflicts[-1]})")

    def drop(self, schema: str, table: str) -> None:
        """Remove a table entirely (Migrate drop_table, replacing a copy target)."""
        if self._follow is not None:
            self._follow.dropped(self, schema, table)
        self.storage.delete_prefix(self.table_prefix(schema, table))

    def follow_up(self, latest: TableVersion) -> None:
        """Run the `follow` hook (and retention) on the latest committed version, as after its commit: a writer
        that died between its records commit and the hook's work (or a catalog outage) left them behind, and a
        retried request answered "already applied" commits nothing that would catch them up."""
        follow = self._follow
        if follow is not None:
            self.collect_garbage(latest.prefix, latest.version,
                                 before_retiring=lambda oldest: follow(self, latest.prefix, latest, oldest))

    def fault_point(self, step: str) -> None:
        """A named step of a commit's work, where tests inject a crash (the store's `fault` hook)."""
        self._fault(step)

    # ---- protocol steps ----------------------------------------------------------------------

    def _claim(self, prefix: str, target: int) -> int | ClaimRefused:
        """The generation of the claim on `target` this writer now holds, or why it holds none.

        A stale claim (generation k, the highest) is taken over by creating generation k+1 if absent: of several
        writers that found it stale only one creates it, and only that one clears the unfinished directory."""
        generations = self._claim_generations(prefix, target)
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
        if not self._claim_is_stale(holder):
            return ClaimRefused.BUSY
        if not self.storage.create_exclusive(layout.claim_path(prefix, target, top + 1), self._claim_body()):
            return ClaimRefused.BUSY  # another writer took it over first
        taken = self._unless_committed(prefix, target, top + 1)
        if taken is ClaimRefused.COMMITTED:
            return taken
        logs.warning(f"{prefix}: taking over version {target} (claim generation {top + 1}) from a writer that "
                     "stopped before committing")
        self._clear_unfinished(prefix, target)
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

    def _claim_generations(self, prefix: str, target: int) -> list[int]:
        paths = self.storage.list_starting_with(layout.claim_path(prefix, target))
        return sorted(g for g in (layout.parse_claim_generation(p, prefix, target) for p in paths) if g is not None)

    def _holds_claim(self, prefix: str, target: int, generation: int) -> bool:
        generations = self._claim_generations(prefix, target)
        return bool(generations) and generations[-1] == generation

    def _drop_claims(self, prefix: str, target: int) -> None:
        """Every generation, the highest last: while it stands, no other writer can take the version over."""
        for generation in self._claim_generations(prefix, target):
            self.storage.delete(layout.claim_path(prefix, target, generation))

    def _claim_is_stale(self, holder: dict[str, Any]) -> bool:
        if holder.get("writer") == self.writer_id:
            return True  # ours, from an attempt that died; the caller holds the table lock
        if holder.get("host") == socket.gethostname():
            try:
                os.kill(int(holder.get("pid", -1)), 0)
            except ProcessLookupError:
                return True
            except (PermissionError, ValueError, OverflowError):
                pass
        return time.time() - float(holder.get("at", 0)) > self.claim_lease_seconds

    def _clear_unfinished(self, prefix: str, target: int) -> None:
        self.storage.delete_prefix(layout.version_dir(prefix, target))
        self.storage.delete_prefix(layout.changes_dir(prefix, target))

    def _write_changes(self, prefix: str, target: int, changes: ChangeSet) -> None:
        """The change directory's metadata, then its `_manifest` (last, as in every records directory)."""
        s = self.storage
        directory = layout.changes_dir(prefix, target)
        for name, body in changes.metadata.items():
            s.write_bytes(f"{directory}/{name}", body)
        s.write_bytes(f"{directory}/{records.MANIFEST}", records.dumps(
            records.manifest_json([(s.url(f"{directory}/{name}"), size) for name, size in changes.files])))

    def _carry(self, base: TableVersion, table: TableDef, target: int, files: list[DataFile]) -> list[DataFile]:
        """The base's unchanged files as the new version lists them. Referencing layout: where they are stored
        (a file of the base's own directory now names it). Complete layout: copied into the new directory, from
        wherever they are (so a table switched from the referencing layout gets complete versions again)."""
        home = layout.version_dir_name(base.version)
        if self.layout == REFERENCING:
            return [f if f.stored_in is not None else replace(f, stored_in=home) for f in files]
        directory = layout.version_dir(base.prefix, target)
        self._carry_forward(table, directory, target, [(file_path(base.directory, f), f"{directory}/{f.name}")
                                                       for f in files])
        # the table formats reference a file where it was first written: remembered (and kept by retention) only
        # while they are on
        return [replace(f, stored_in=None, written_in=(f.written_in or f.stored_in or home) if self._follow else None)
                for f in files]

    def _carry_forward(self, table: TableDef, directory: str, version: int, pairs: list[tuple[str, str]]) -> None:
        """Hard links on disk, server-side copies on S3. A copy's time is spent by the object store, so they run
        concurrently (one after another, a 10M-row table's 32 files took seconds on every write that touched none
        of them); many S3 copies go to `copies` (Spark's executors) when the store has one."""
        if not pairs:
            return
        if self._copies is not None and self.storage.spec.is_s3 and len(pairs) >= FAN_OUT_COPIES:
            self._copies(self.storage.spec, table, directory, version, pairs)
            return
        with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(pairs))) as pool:  # a pool refused at exit:
            for _ in pool.map(lambda pair: self.storage.copy(*pair), pairs):  # `_write` abandons the write
                pass

    def _commit(self, schema: str, prefix: str, base: TableVersion | None, target: int, generation: int,
                pending: PendingVersion, batch_id: str | None, committed_at: float) -> TableVersion:
        s = self.storage
        directory = layout.version_dir(prefix, target)
        if pending.changes is not None:
            with phases.timed("change_files"):
                self._write_changes(prefix, target, pending.changes)
        carried = [f for f in pending.carried if f.rows > 0]
        if base is not None:
            carried = self._carry(base, pending.table, target, carried)
        files = [f for f in [*carried, *pending.new_files] if f.rows > 0]
        if not files:  # an empty table is one zero-row data file (Redshift COPY needs a file)
            files = [write_data_file(s, directory, layout.data_file_name(None), empty_table(pending.table),
                                     pending.table, None)]
        totals = pending.changes.totals if pending.changes is not None else dict(base.change_totals if base else {})
        recent = (*(base.recent_batches if base else ()), *((batch_id,) if batch_id else ()))[-RECENT_BATCHES:]
        with phases.timed("metadata"):
            schema_doc = records.dumps(records.schema_json(pending.table))
            s.write_bytes(f"{directory}/{records.SCHEMA_JSON}", schema_doc)
            s.write_bytes(f"{directory}/{records.SCHEMA_LEGACY}", schema_doc)
            s.write_bytes(f"{directory}/{records.FORMAT_FILE}", b"")
            s.write_bytes(f"{directory}/{records.FILES_JSON}", records.dumps({"files": [f.to_json() for f in files]}))
            s.write_bytes(f"{directory}/{records.TABLE_JSON}", records.dumps({
                "schema": schema, "table": field_ids.assign(pending.table).to_json(), "version": target,
                "committed_at": committed_at, "recent_batches": list(recent), "change_totals": totals}))
            s.write_bytes(f"{directory}/{records.MANIFEST}", records.dumps(
                records.manifest_json([(s.url(file_path(directory, f)), f.bytes) for f in files])))
        self._fault("before_commit_record")
        # files listed where an earlier version wrote them were checked when the base loaded, and retention keeps
        # every file the latest version lists; only a base older than the latest (a repair) is checked again
        on_base = base is not None and base.version == target - 1
        self._check_before_commit(prefix, target, generation,
                                  [f for f in files if f.stored_in is None] if on_base else files, pending.changes)
        record = {"version": target, "directory": layout.version_dir_name(target), "committed_at": committed_at,
                  "operation": pending.operation, "batch_id": batch_id, "writer": self.writer_id,
                  "base": base.version if base is not None else 0, "layout": self.layout}
        if pending.changes is not None:
            record["changes"] = {"directory": f"changes/{layout.version_dir_name(target)}", **pending.changes.summary}
        if not s.create_exclusive(layout.log_path(prefix, target), records.dumps(record)):
            raise LostClaim(f"{prefix!r}: version {target} was committed by another writer during this write")
        self._fault("after_commit_record")
        return TableVersion(schema=schema, version=target, table=pending.table, files=tuple(files), prefix=prefix,
                            committed_at=committed_at, recent_batches=recent, change_totals=totals)

    def _check_before_commit(self, prefix: str, target: int, generation: int, files: list[DataFile],
                             changes: ChangeSet | None) -> None:
        """Only the claim's holder commits, and only a version holding every file its manifests list."""
        if not self._holds_claim(prefix, target, generation):
            raise LostClaim(f"{prefix!r}: another writer took over version {target} while this write prepared it")
        missing = self._missing_of_version(layout.version_dir(prefix, target), files)
        if changes is not None:
            directory = layout.changes_dir(prefix, target)
            missing += [f"changes/{name}" for name in self._missing_files(
                directory, [*changes.metadata, records.MANIFEST, *(name for name, _ in changes.files)])]
        if missing:
            raise LostClaim(f"{prefix!r}: version {target} lacks {len(missing)} of its files before its commit "
                            f"({', '.join(missing[:SHOWN_MISSING])}); nothing was committed")

    def _finish(self, prefix: str, committed: TableVersion) -> None:
        s = self.storage
        try:
            s.write_bytes(layout.latest_path(prefix), records.dumps({
                "version": committed.version, "directory": layout.version_dir_name(committed.version),
                "committed_at": committed.committed_at}))
            for version in (committed.version - 1, committed.version):  # the base's: a writer died after its commit
                self._drop_claims(prefix, version)
            follow = self._follow
            with phases.timed("retention"):  # the formats' commits, inside it, are phases of their own
                if follow is None:
                    self.collect_garbage(prefix, committed.version)
                else:
                    self._fault("before_table_formats")
                    self.collect_garbage(prefix, committed.version,
                                         before_retiring=lambda oldest: follow(self, prefix, committed, oldest))
        except StorageError as exc:  # the commit stands; housekeeping is retried next time
            logs.warning(f"{prefix}: version {committed.version} committed; housekeeping failed: {exc}")

    def _abandon(self, prefix: str, target: int, generation: int) -> None:
        """Undo an attempt that committed nothing. Its directory is cleared only while this writer still holds the
        claim and `target` is not committed: after a takeover it belongs to another writer, who may commit it."""
        try:
            if self.storage.exists(layout.log_path(prefix, target)) or not self._holds_claim(prefix, target, generation):
                self.storage.delete(layout.claim_path(prefix, target, generation))
                return
            self._clear_unfinished(prefix, target)
            self._drop_claims(prefix, target)
        except Exception as exc:  # best effort: a leftover is cleaned up by takeover or retention
            logs.warning(f"{prefix}: could not clean up unfinished version {target}: {exc}")

    # ---- retention ---------------------------------------------------------------------------

    def collect_garbage(self, prefix: str, latest: int,
                        before_retiring: Callable[[int], bool] | None = None) -> list[str]:
        """Retire versions older than the newest `keep_versions` once superseded for `min_age_seconds` (oldest
        first, stopping at the first one still too young), and delete uncommitted leftovers (no commit record, no
        live claim) older than that age. A retired version loses its metadata and every data file no retained
        version lists (in the complete layout: its whole directory); files that later versions still list stay
        in its directory. The change directories of committed versions are kept: consumers read them at their own
        pace. `before_retiring(oldest retained version)` runs before any version retires (always, when given);
        False: nothing retires this time. Returns the version directories retired or deleted."""
        now = time.time()
        removed: list[str] = []
        retiring: list[int] = []
        too_young = False  # a committed version still kept: the ones after it are kept too
        keep_from = latest - self.retention.keep_versions + 1
        oldest_kept = max(1, keep_from)
        for name in self.storage.list_children(prefix):
            n = layout.parse_version_dir(name)
            if n is None or n >= keep_from:
                continue
            if not self.storage.exists(layout.log_path(prefix, n)):
                newest = max((o.mtime for o in self.storage.list_recursive(f"{prefix}/{name}")), default=0.0)
                if now - newest >= self.retention.min_age_seconds:
                    self.storage.delete_prefix(layout.changes_dir(prefix, n))  # committed versions keep theirs
                    self.storage.delete_prefix(f"{prefix}/{name}")
                    self._drop_claims(prefix, n)
                    removed.append(name)
                continue
            if not too_young:
                if self._retired(prefix, n):
                    continue  # retired before: its directory holds only files that later versions list
                superseded_at = self._committed_at(prefix, n + 1)
                too_young = superseded_at is None or now - superseded_at < self.retention.min_age_seconds
            if too_young:
                oldest_kept = min(oldest_kept, n)
            else:
                retiring.append(n)
        if retiring:
            oldest_kept = retiring[-1] + 1
        if before_retiring is not None and not before_retiring(oldest_kept):
            return removed
        if retiring:
            listed = self._listed_by_retained(prefix, retiring[-1] + 1, latest)
            for n in retiring:
                self._retire(prefix, n, listed)
                removed.append(layout.version_dir_name(n))
        return removed

    def _retired(self, prefix: str, n: int) -> bool:
        return not self.storage.exists(f"{layout.version_dir(prefix, n)}/{records.FILES_JSON}")

    def _listed_by_retained(self, prefix: str, first: int, latest: int) -> set[str]:
        """The paths of the data files that versions `first`..`latest` (the retained ones) list outside their own
        directories' versions, i.e. every file a retiring version's directory may still have to keep.

        Version m lists the files of its base (the version it was written on) and new files of its own directory,
        so a file of a version before `first` that a retained version lists is listed by `first` too, unless that
        version's base is older than `first` (a repair from an older version): `_files.json` is read for `first`
        and for those only. A write in progress has the latest version as its base, which is retained."""
        paths: set[str] = set()
        need = True
        for m in range(first, latest + 1):
            base = self.commit_record(prefix, m).get("base")
            if need or not isinstance(base, int) or base < first:
                files = self._version_files(prefix, m)
                need = files is None  # unreadable: its successor lists what it listed (or its own base's)
                directory = layout.version_dir(prefix, m)
                paths.update(path for f in files or () for path in held_paths(directory, f))
        return paths

    def _retire(self, prefix: str, n: int, listed: set[str]) -> None:
        """Delete version n's metadata and the data files it lists or holds that no retained version lists."""
        s = self.storage
        directory = layout.version_dir(prefix, n)
        files = self._version_files(prefix, n) or []
        elsewhere = {path for f in files for path in held_paths(directory, f) if not path.startswith(f"{directory}/")}
        own = [o.path for o in s.list_recursive(directory) if o.path.rsplit("/", 1)[-1] not in VERSION_METADATA]
        kept = [path for path in own if path in listed]
        s.delete(f"{directory}/{records.MANIFEST}")
        emptied: set[str] = set()
        for path in sorted(elsewhere - listed):
            s.delete(path)
            emptied.add(path.rsplit("/", 1)[0])
        # data files first, `_files.json` last: a retirement cut short is found again (and finished) next time
        for path in own:
            if path not in listed:
                s.delete(path)
        for name in RETIRE_ORDER:
            s.delete(f"{directory}/{name}")
        if not kept:
            s.delete_prefix(directory)  # the folder itself, and anything not a data or metadata file
        for folder in emptied:  # a retired directory whose last listed file went
            if not s.exists(f"{folder}/{records.FILES_JSON}") and not s.list_children(folder):
                s.delete_prefix(folder)
        self._drop_claims(prefix, n)

    def _version_files(self, prefix: str, n: int) -> list[DataFile] | None:
        try:
            listing = json.loads(self.storage.read_bytes(f"{layout.version_dir(prefix, n)}/{records.FILES_JSON}"))
        except (FileNotFoundError, ValueError):
            return None
        return [DataFile.from_json(f) for f in listing["files"]]

    def commit_record(self, prefix: str, n: int) -> dict[str, Any]:
        try:
            record = json.loads(self.storage.read_bytes(layout.log_path(prefix, n)))
        except (FileNotFoundError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def _committed_at(self, prefix: str, n: int) -> float | None:
        at = self.commit_record(prefix, n).get("committed_at")
        return float(at) if isinstance(at, int | float) else None


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


def _abandoned_by_shutdown(exc: RuntimeError) -> WriteAbandoned | None:
    """The server's grace period ran out and the interpreter is exiting: concurrent.futures takes no new work
    (its message is the only signal: "cannot schedule new futures after [interpreter] shutdown", the second when a
    pool's worker saw the exit first). The caller removes the uncommitted version."""
    if "cannot schedule new futures after" not in str(exc):
        return None
    return WriteAbandoned("write abandoned: the server is stopping and its grace period ran out before the "
                          "version was committed; nothing was committed, retry the request")
