"""Reading a table's committed versions: the latest version number, a version's definition and files, and the
newest complete version when the latest one lacks files."""
from __future__ import annotations

import json
from collections.abc import Sequence

from destination.shared import field_ids, logs, phases
from destination.shared.on_disk import layout, records
from destination.shared.on_disk.datafiles import DataFile
from destination.shared.on_disk.locations import file_dir
from destination.shared.records_formats.codec import table_codec
from destination.shared.storage.base import Storage
from destination.shared.table_model import TableDef
from destination.store.table_names import TableNames
from destination.store.versions import IncompleteVersion, TableVersion

VERSION_METADATA = (*records.METADATA_FILES, records.MANIFEST)


class VersionReader:
    """Loads committed versions, checking that every file a version lists is there."""

    def __init__(self, storage: Storage, names: TableNames) -> None:
        self.storage = storage
        self._names = names

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
        try:
            meta = json.loads(self.storage.read_bytes(f"{directory}/{records.TABLE_JSON}"))
            files = json.loads(self.storage.read_bytes(f"{directory}/{records.FILES_JSON}"))
        except FileNotFoundError:
            return self._uncommitted(schema, table, n, self.missing_files(directory, VERSION_METADATA))
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
        missing = self.missing_of_version(directory, loaded.files, table_codec(definition).format_file)
        return self._uncommitted(schema, table, n, missing) if missing else loaded

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
