"""Reading a table's committed versions: the latest version number, a version's definition and files, and the
newest complete version when the latest one lacks files."""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from destination.model import field_ids
from destination.model.table_model import TableDef
from destination.on_disk import layout, records
from destination.on_disk.datafiles import DataFile
from destination.on_disk.locations import file_dir
from destination.records_formats.codec import table_codec
from destination.runtime import logs, phases
from destination.storage.base import Storage
from destination.store.log_pruning import read_pruned
from destination.store.table_names import TableNames
from destination.store.versions import IncompleteVersion, TableVersion

VERSION_METADATA = (*records.METADATA_FILES, records.MANIFEST)
# tables whose latest version a reader keeps, and the data files they may list in all (a file entry is a few hundred
# bytes): past either, the least recently used are forgotten first
KNOWN_TABLES = 4096
KNOWN_FILES = 200_000


class VersionReader:
    """Loads committed versions, checking that every file a version lists is there.

    A committed version never changes, so the definition and file list of the latest version this process loaded
    or committed are kept per table and used again, with no reads of its `_table.json` and `_files.json` (two
    requests on S3, twice a small sync), while the `_latest` read last names that very version: the same number
    and commit time (a table dropped and created again, or another writer's commit, names another). Its files are
    checked all the same (one listing), as every load checks them."""

    def __init__(self, storage: Storage, names: TableNames) -> None:
        self.storage = storage
        self._names = names
        self._lock = threading.Lock()
        self._known: OrderedDict[str, TableVersion] = OrderedDict()
        self._known_files = 0
        self._named: OrderedDict[str, tuple[int, float]] = OrderedDict()  # prefix → (version, commit time) of `_latest`
        self._records: dict[str, dict[str, Any]] = {}  # prefix → the commit record of its kept version, if written here

    def _read_latest(self, prefix: str) -> tuple[int, Any]:
        """The version and commit time `_latest` names; ValueError (or KeyError, TypeError) when unreadable."""
        latest = json.loads(self.storage.read_bytes(layout.latest_path(prefix)))
        return int(latest["version"]), latest.get("committed_at")

    def latest_version_number(self, prefix: str) -> int:
        n, at = 0, None
        try:
            n, at = self._read_latest(prefix)
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError):
            logs.warning(f"{prefix}: unreadable _latest; finding the latest version from the commit log")
        named = n
        if n == 0:  # no `_latest` (a new table, or one that lost it): its oldest records may have been pruned
            n = read_pruned(self.storage, prefix).first_record - 1
        while self.storage.exists(layout.log_path(prefix, n + 1)):
            n += 1
        with self._lock:
            if n == named and isinstance(at, float):
                self._named[prefix] = (n, at)
                self._named.move_to_end(prefix)
                while len(self._named) > KNOWN_TABLES:
                    self._named.popitem(last=False)
            else:
                self._named.pop(prefix, None)
        return n

    def latest_names(self, version: TableVersion) -> bool:
        """Whether `_latest` names `version` (number and commit time): one read, no stepping through the log."""
        try:
            return self._read_latest(version.prefix) == (version.version, version.committed_at)
        except (FileNotFoundError, ValueError, KeyError, TypeError):  # gone, or unreadable: not known to name it
            return False

    def remember(self, version: TableVersion, record: dict[str, Any] | None = None) -> None:
        """`version` (just committed by this process, or loaded complete) as its table's latest known version: it
        must be the version as `version_of` builds it from its metadata documents; `record`: its commit record,
        when this process just wrote it."""
        with self._lock:
            replaced = self._known.pop(version.prefix, None)
            self._known_files += len(version.files) - (len(replaced.files) if replaced is not None else 0)
            self._known[version.prefix] = version
            if record is not None:
                self._records[version.prefix] = record
            else:
                self._records.pop(version.prefix, None)
            while len(self._known) > KNOWN_TABLES or (self._known_files > KNOWN_FILES and len(self._known) > 1):
                prefix, forgotten = self._known.popitem(last=False)
                self._known_files -= len(forgotten.files)
                self._records.pop(prefix, None)

    def written_record(self, version: TableVersion) -> dict[str, Any] | None:
        """The commit record of `version` when this process wrote it and keeps the version as its table's latest
        (same number and commit time: a table dropped and made again elsewhere has another)."""
        with self._lock:
            known = self._known.get(version.prefix)
            if known is None or known.version != version.version or known.committed_at != version.committed_at:
                return None
            return self._records.get(version.prefix)

    def forget(self, prefix: str) -> None:
        """A table dropped by this process: nothing of it is known any more."""
        with self._lock:
            forgotten = self._known.pop(prefix, None)
            self._known_files -= len(forgotten.files) if forgotten is not None else 0
            self._named.pop(prefix, None)
            self._records.pop(prefix, None)

    def _known_version(self, prefix: str, n: int) -> TableVersion | None:
        with self._lock:
            known = self._known.get(prefix)
            if known is None or known.version != n or self._named.get(prefix) != (n, known.committed_at):
                return None
            return known

    def is_latest_known(self, version: TableVersion) -> bool:
        """`version` is the very version kept as its table's latest (loaded complete or committed by this process),
        and the `_latest` read last names it."""
        return self._known_version(version.prefix, version.version) is version

    def load(self, schema: str, table: str, version: int | None = None) -> TableVersion | None:
        """The given version (IncompleteVersion if it lacks files), or the newest complete one."""
        with phases.timed("load"):
            if version is not None:
                return self.load_version(schema, table, version) if version else None
            return self.last_complete(schema, table,
                                      self.latest_version_number(self._names.table_prefix(schema, table)))

    def last_complete(self, schema: str, table: str, n: int) -> TableVersion | None:
        """The newest complete version at or below n: a table whose latest committed version is incomplete stays
        readable (writes refuse it as their base until `repair`)."""
        while n > 0:
            try:
                return self.load_version(schema, table, n)
            except IncompleteVersion as incomplete:
                logs.warning(f"{schema}.{table}: version {n} is committed but {len(incomplete.missing)} of its files "
                             f"are missing; reading version {n - 1} instead. Run `records-destination repair "
                             f"{schema}.{table}` to repair the table")
                n -= 1
        return None

    def load_version(self, schema: str, table: str, n: int) -> TableVersion | None:
        """Version n; None if it was never committed; IncompleteVersion if committed but lacking a file."""
        prefix = self._names.table_prefix(schema, table)
        directory = layout.version_dir(prefix, n)
        known = self._known_version(prefix, n)
        if known is not None and known.schema == schema \
                and not self.missing_of_version(directory, known.files, table_codec(known.table).format_file):
            return known
        try:
            meta = json.loads(self.storage.read_bytes(f"{directory}/{records.TABLE_JSON}"))
            files = json.loads(self.storage.read_bytes(f"{directory}/{records.FILES_JSON}"))
        except FileNotFoundError:
            return self._uncommitted(schema, table, n, self.missing_files(directory, VERSION_METADATA))
        loaded = version_of(schema, prefix, n, meta, files)
        if not loaded.table.field_ids:
            loaded = replace(loaded, table=self._ids_of_before(prefix, loaded.table))
        missing = self.missing_of_version(directory, loaded.files, table_codec(loaded.table).format_file)
        if missing:
            return self._uncommitted(schema, table, n, missing)
        with self._lock:
            named = self._named.get(prefix) == (n, loaded.committed_at)
        if named:  # the latest version (an older one loaded, by a catch-up say, is not kept)
            self.remember(loaded)
        return loaded

    def _ids_of_before(self, prefix: str, table: TableDef) -> TableDef:
        """A table committed before field ids were kept: the ids of its Iceberg metadata, where it has one (files
        are then written with the ids its snapshots and name mapping already give the columns)."""
        metadata = field_ids.latest_iceberg_metadata(self.storage.read_bytes, prefix)
        return table if metadata is None else field_ids.from_iceberg(table, metadata)

    def _uncommitted(self, schema: str, table: str, n: int, missing: list[str]) -> TableVersion | None:
        """A version lacking files is one still being written (None), unless it is committed (IncompleteVersion)."""
        if self.storage.exists(layout.log_path(self._names.table_prefix(schema, table), n)):
            raise IncompleteVersion(self.storage, schema, table, n, missing)
        return None

    def missing_of_version(self, directory: str, files: Sequence[DataFile],
                           format_file: str = records.FORMAT_FILE) -> list[str]:
        """The version's metadata (`format_file`: its records format's) and data files that are not where it lists
        them (a file stored in another version's directory is named `v<K>/<name>`); one listing per directory."""
        wanted: dict[str, list[str]] = {directory: [*records.metadata_files(format_file), records.MANIFEST]}
        for f in files:
            wanted.setdefault(file_dir(directory, f), []).append(f.name)
        return [name if folder == directory else f"{folder.rsplit('/', 1)[1]}/{name}"
                for folder, names in wanted.items() for name in self.missing_files(folder, names)]

    def missing_files(self, directory: str, names: Sequence[str]) -> list[str]:
        """Which of `names` (relative to directory) are not there; one listing, not a lookup per file."""
        present = {o.path[len(directory) + 1:] for o in self.storage.list_recursive(directory)}
        return [name for name in names if name not in present]


def version_of(schema: str, prefix: str, n: int, meta: dict[str, Any], files: dict[str, Any]) -> TableVersion:
    """Version n as its `_table.json` (`meta`) and `_files.json` (`files`) documents describe it."""
    return TableVersion(
        schema=schema, version=n, table=TableDef.from_json(meta["table"]),
        files=tuple(DataFile.from_json(f) for f in files["files"]), prefix=prefix,
        committed_at=float(meta.get("committed_at", 0.0)),
        recent_batches=tuple(meta.get("recent_batches", ())),
        change_totals=dict(meta.get("change_totals", {})),
    )
