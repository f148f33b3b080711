"""Following the records commits with the table formats: after each commit (the store's `publish` hook) every format
is brought up to the committed version, versions it missed first (a writer that died between the records commit
and the formats' commits, or formats turned on for an existing table). The records commit stays the commit point:
a format entry is only ever written for a committed version, and a format behind is caught up by the next write
of the table or by `records-destination publish`.

Change data: with change files on and Delta followed (the format that reads them), a version with row events gets
Delta change data files under `_change_data/v<N>/` (the table's columns, `_destination_meta` NULL, and
`_change_type`), one per change file, derived from the version's change files after its commit (so any change
format, Arcion or Parquet, gives the same feed; a column a minimal image leaves out is NULL in it). Their names are
fixed, so a catch-up that writes them again writes the same bytes; Delta deletes them with the versions it retires.
"""
from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from concurrent.futures import wait
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from destination.changes import cdf
from destination.changes.metadata import KIND_ROWS
from destination.changes.replay import version_files
from destination.model.table_model import DESTINATION_META
from destination.model.type_mapping import arrow_schema
from destination.on_disk import layout
from destination.on_disk.datafiles import write_options
from destination.on_disk.locations import first_written
from destination.on_disk.options import describes
from destination.on_disk.records import FILES_JSON
from destination.runtime import logs, phases
from destination.runtime.errors import cause_text, scrub
from destination.runtime.pools import shared_pool
from destination.storage.base import Storage
from destination.store.table_store import TableStore
from destination.store.versions import IncompleteVersion, TableVersion
from destination.table_formats.delta import CHANGE_DATA
from destination.table_formats.version import DELTA, ICEBERG, ChangeDataFile, LakeFile, LakeVersion, TableFormat

FORMAT_THREADS = 8  # formats committed beside a request's first one, for all requests of the process at once


class TableFormatPublisher:
    """The store's `publish` hook for the configured formats (destination/store/versions.py `Publisher`)."""

    def __init__(self, formats: Sequence[TableFormat]) -> None:
        self.formats = tuple(formats)

    def __call__(self, store: TableStore, prefix: str, committed: TableVersion, oldest_retained: int) -> bool:
        """Every format brought up to `committed`, side by side: the one that reads change data (its change data
        files are the request's `change_files` phase) on this thread, the others in a pool, each in a copy of the
        request's context (its log fields) without its phases (their metadata lives in folders of their own). The
        request's phases hold the first format's time and, for each other one, the time spent waiting for it
        afterwards. Should the table have moved meanwhile to a records format a format does not describe (`reformat`
        by another process, which removes that format's metadata after its commit), what was just written for
        `committed` in that format is removed again."""
        built = BuiltVersions()  # each version built once for all formats (its change data written once)

        def follow(fmt: TableFormat) -> bool:
            try:
                bring_up_to_date(store, prefix, fmt, committed, oldest_retained, built)
                return True
            except Exception as exc:  # the records commit stands: the next write of the table catches the format up
                logs.warning(f"{committed.schema}.{committed.table.name}: version {committed.version} is committed "
                             f"but its {fmt.name} metadata could not be written ({_error_text(exc)}); the next write of "
                             f"the table, or `records-destination publish`, brings it up to date")
                return False
        if not self.formats:
            return True
        first, *others = sorted(self.formats, key=lambda fmt: not fmt.reads_change_data)
        pool = shared_pool("table-formats", FORMAT_THREADS)
        beside = [(fmt, pool.submit(contextvars.copy_context().run, phases.detached, follow, fmt)) for fmt in others]
        try:
            with phases.timed(first.name):
                followed = follow(first)
        except BaseException:
            wait([future for _fmt, future in beside])  # no format still writing once the request goes on
            raise
        for fmt, future in beside:  # the wait for each is its phase
            with phases.timed(fmt.name):
                followed = future.result() and followed
        moved = later_version(store, prefix, committed)
        if moved is not None:
            for fmt in self.formats:
                if not applies(fmt, moved):
                    _remove_stale(store.storage, prefix, fmt, moved)
        return followed

    def dropped(self, store: TableStore, schema: str, table: str) -> None:
        """The formats' metadata is in the table's folder: dropped with it."""


class BuiltVersions:
    """The versions built for the formats (of one commit, or of a catch-up), shared by formats running side by
    side: a version's change data is written once. No lock is held while one is built (a format that does not read
    change data does not wait for another's); a version built twice at once is the same version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[int, LakeVersion] = {}

    def get(self, store: TableStore, prefix: str, version: TableVersion, with_change_data: bool) -> LakeVersion:
        with self._lock:
            made = self._versions.get(version.version)
        if made is not None and (made.change_data is not None or not with_change_data):
            return made
        made = lake_version(store, prefix, version, with_change_data)
        with self._lock:
            kept = self._versions.get(version.version)
            if kept is None or kept.change_data is None:
                self._versions[version.version] = made
        return made


def bring_up_to_date(store: TableStore, prefix: str, fmt: TableFormat, latest: TableVersion,
                     oldest_retained: int, built: BuiltVersions | None = None) -> int:
    """Commit to `fmt` every committed version it lacks up to `latest` (from the oldest retained one when it holds
    none); versions retired or incomplete meanwhile are skipped. Returns the number of versions committed."""
    storage = store.storage
    if not applies(fmt, latest):  # Delta reads Parquet data files only; Iceberg Parquet and Avro files
        later = later_version(store, prefix, latest)  # a move back by another process: its metadata is not stale
        if later is None or not applies(fmt, later):
            _remove_stale(storage, prefix, fmt, latest)
        return 0
    versions = BuiltVersions() if built is None else built

    def lake(version: TableVersion) -> LakeVersion:
        return versions.get(store, prefix, version, fmt.reads_change_data)

    log = fmt.log(storage, prefix)
    last = log.last
    if last is not None and last >= latest.version:
        return 0
    first = oldest_retained if last is None else max(last + 1, oldest_retained)
    missed: list[TableVersion] = []
    for n in range(first, latest.version):
        try:
            version = store.load(latest.schema, latest.table.name, n)
        except IncompleteVersion:
            version = None
        if version is not None:
            # a version in a records format `fmt` does not describe (before `reformat` moved the table to one it
            # does) has no entry, and neither has any before it: its history starts again after that move
            missed = [*missed, version] if applies(fmt, version) else []
    for version in missed:
        fmt.commit(storage, prefix, lake(version), oldest_retained)
    fmt.commit(storage, prefix, lake(latest), oldest_retained, None if missed else log)
    return len(missed) + 1


def later_version(store: TableStore, prefix: str, version: TableVersion) -> TableVersion | None:
    """The table's latest version when a version after `version` was committed meanwhile (a move to another records
    format by another process, while this one wrote `version`'s formats), else None: one existence check of the
    next commit record in the common case."""
    if not store.storage.exists(layout.log_path(prefix, version.version + 1)):
        return None
    return store.load(version.schema, version.table.name)


def applies(fmt: TableFormat, version: TableVersion) -> bool:
    """Whether `fmt` describes the data files of `version` (Delta: Parquet tables; Iceberg: Parquet and Avro)."""
    return describes(fmt.name, version.table.stored_format)


def _remove_stale(storage: Storage, prefix: str, fmt: TableFormat, latest: TableVersion) -> None:
    """A table moved to another records format (`records-destination reformat`) keeps no metadata of a format that
    does not describe its files: readers of it fail instead of reading the rows of the last version it described. The move
    removes it; here it is removed when the move stopped before (the next commit, request or `publish` run)."""
    if fmt.log(storage, prefix).last is None:
        return
    for folder in fmt.folders:
        storage.delete_prefix(f"{prefix}/{folder}")
    logs.info(f"{latest.schema}.{latest.table.name}: its {fmt.name} metadata removed: the table's records format is "
              f"{latest.table.stored_format} since a move (`records-destination reformat`), which {fmt.name} does "
              "not describe")


def lake_version(store: TableStore, prefix: str, version: TableVersion, with_change_data: bool) -> LakeVersion:
    """The version as the formats take it; `with_change_data` (a format reads them): its row events written as
    change data files (none for a version without row events: `()`)."""
    record = store.record_of(version)
    changes: dict[str, Any] = record.get("changes") or {}
    operation = record.get("operation") or {}
    change_data: tuple[ChangeDataFile, ...] | None = None
    if with_change_data:
        rows = bool(changes) and changes.get("kind") == KIND_ROWS
        with phases.timed("change_files"):
            change_data = write_change_data(store.storage, prefix, version) if rows else ()
    return LakeVersion(
        version=version.version, committed_at=version.committed_at, table=version.table,
        files=tuple(LakeFile(path=first_written(version.directory, f), bytes=f.bytes, rows=f.rows)
                    for f in version.files),
        operation=str(operation.get("kind", "write")), change_feed=bool(changes), change_data=change_data)


def write_change_data(storage: Storage, prefix: str, version: TableVersion) -> tuple[ChangeDataFile, ...]:
    """The version's row events as Delta change data files, one per change file (empty ones left out)."""
    changes = version_files(storage, prefix, version.version)
    table = changes.table
    schema = arrow_schema(table.columns).append(pa.field(cdf.CHANGE_TYPE, pa.string()))
    folder = f"{CHANGE_DATA}/{layout.version_dir_name(version.version)}"
    written = []
    for i, (events, _) in enumerate(changes.events()):
        rows = cdf.change_rows(events, version.version, 0)
        if not rows.num_rows:
            continue
        images = rows.drop_columns([cdf.COMMIT_VERSION, cdf.COMMIT_TIMESTAMP, cdf.CHANGE_TYPE])
        images = images.append_column(DESTINATION_META, pa.nulls(rows.num_rows, pa.string()))
        data = images.append_column(cdf.CHANGE_TYPE, rows.column(cdf.CHANGE_TYPE)).select(schema.names).cast(schema)
        path = f"{folder}/{i:05d}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(data, sink, **write_options(data))
        body = sink.getvalue().to_pybytes()
        storage.write_bytes(f"{prefix}/{path}", body)
        written.append(ChangeDataFile(path=path, bytes=len(body)))
    return tuple(written)


def _error_text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    causes = cause_text(exc)
    return f"{type(exc).__name__}: {scrub(lines[0]) if lines else ''}"[:400] + (f"; caused by {causes}" if causes else "")


def table_formats_named(names: Sequence[str]) -> list[TableFormat]:
    """The writers of the configured formats (`table_formats`), in the configuration's order."""
    from destination.table_formats.delta import DeltaFormat
    from destination.table_formats.iceberg import IcebergFormat

    writers: dict[str, TableFormat] = {DELTA: DeltaFormat(), ICEBERG: IcebergFormat()}
    return [writers[n] for n in names]


def oldest_retained(store: TableStore, prefix: str, latest: int) -> int:
    """The oldest version retention has not retired (its `_files.json` is there); `latest` when none older is."""
    for name in store.storage.list_children(prefix):
        n = layout.parse_version_dir(name)
        if n is not None and n < latest and store.storage.exists(f"{layout.version_dir(prefix, n)}/{FILES_JSON}"):
            return n
    return latest
