"""Which tables the served catalog answers, and each one's latest Iceberg metadata, kept in memory.

A table's answer is built once per metadata version (the file read and parsed, the response serialised) and then
served from memory. It is current because the commit path tells the index at once of what this process committed
or dropped (`watch`: the store's commit observer and drop hook), and because another process's commits are seen by
re-reading the table's `metadata/version-hint.text` (one small read, the pointer the formats move after each commit)
at most every RECHECK_SECONDS per table, on its next load. No request lists a table's files: only a pointer that
names a metadata file that is gone (a drop under way, a retention race) makes the index look for the newest one
there is, and a table without one is not found (never a file that is not there).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from destination.catalogs.catalog import catalog_name
from destination.catalogs.rest import rest_keeps
from destination.on_disk.naming import decode_name
from destination.storage.base import Storage
from destination.store.table_names import TableNames
from destination.store.versions import CommitEvent
from destination.table_formats.iceberg import HINT, METADATA, newest_metadata_version

RECHECK_SECONDS = 2.0


def served_name(name: str) -> str:
    """A Fivetran schema or table name as the catalog serves it: the names the `rest` catalog kind registers
    (destination/catalogs/catalog.py `catalog_name` with `rest_keeps`)."""
    return catalog_name(name, rest_keeps, "name")


def fivetran_name(served: str) -> str | None:
    """The Fivetran name a served name stands for; None: a name `served_name` never gives."""
    try:
        name = decode_name(served)
    except ValueError:
        return None
    try:
        return name if served_name(name) == served else None
    except Exception:  # over 255 characters: never served
        return None


@dataclass(frozen=True)
class Loaded:
    """A table's latest metadata as served: its records version, its file's URL and the metadata's JSON text."""

    version: int
    location: str
    metadata: bytes


@dataclass
class _Entry:
    prefix: str
    checked: float  # time.monotonic() of the last pointer read (0: read it on the next load)
    loaded: Loaded | None = None
    answer: bytes | None = None  # the serialised load answer for `loaded` (answers.py), built once


class RootTables:
    """One root's tables (Iceberg metadata in each table folder), as the catalog serves them."""

    def __init__(self, storage: Storage, recheck_seconds: float = RECHECK_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.storage = storage
        self._names = TableNames(storage)
        self._recheck = recheck_seconds
        self._clock = clock
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()

    # ---- the commit path's news --------------------------------------------------------------

    def committed(self, event: CommitEvent) -> None:
        """The store's commit observer: the table's pointer is read again on its next load."""
        if event.committed is not None:
            with self._lock:
                entry = self._entries.get((event.schema, event.table))
                if entry is None:
                    self._entries[(event.schema, event.table)] = _Entry(event.committed.prefix, 0.0)
                else:
                    entry.prefix, entry.checked = event.committed.prefix, 0.0

    def dropped(self, schema: str, table: str) -> None:
        """The store dropped the table: gone at once (a table made again under the name is read anew)."""
        with self._lock:
            self._entries.pop((schema, table), None)

    # ---- what requests read --------------------------------------------------------------------

    def schemas(self) -> list[str]:
        return self._names.list_schemas()

    def tables(self, schema: str) -> list[str]:
        """The schema's tables that have Iceberg metadata (a pointer read per table not loaded lately)."""
        return [t for t in self._names.list_tables(schema) if self._has_pointer(schema, t)]

    def _has_pointer(self, schema: str, table: str) -> bool:
        with self._lock:
            entry = self._entries.get((schema, table))
            if entry is not None and entry.loaded is not None and self._clock() - entry.checked < self._recheck:
                return True
        return self._pointer(self._names.table_prefix(schema, table)) is not None

    def has_schema(self, schema: str) -> bool:
        return schema in self.schemas()

    def load(self, schema: str, table: str) -> Loaded | None:
        """The table's latest Iceberg metadata; None: no such table, or one without Iceberg metadata."""
        return self._current(schema, table)[0]

    def answer(self, schema: str, table: str, build: Callable[[Loaded], bytes]) -> bytes | None:
        """The table's load answer, `build` (the serialiser) run once per metadata version."""
        loaded, entry = self._current(schema, table)
        if loaded is None or entry is None:
            return None
        answer = entry.answer
        if answer is None or entry.loaded is not loaded:
            answer = build(loaded)
            with self._lock:
                if entry.loaded is loaded:
                    entry.answer = answer
        return answer

    def _current(self, schema: str, table: str) -> tuple[Loaded | None, _Entry | None]:
        key = (schema, table)
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.loaded is not None and now - entry.checked < self._recheck:
                return entry.loaded, entry
        prefix = entry.prefix if entry is not None else self._names.table_prefix(schema, table)
        loaded = self._read(prefix, entry.loaded if entry is not None else None)
        with self._lock:
            current = self._entries.get(key)
            if loaded is None:
                if current is entry:
                    self._entries.pop(key, None)
                return None, None
            if current is None or current is entry:
                if current is None:
                    current = self._entries[key] = _Entry(prefix, now)
                if current.loaded is None or current.loaded.version != loaded.version:
                    current.loaded, current.answer = loaded, None
                current.checked = now
                return current.loaded, current
        return loaded, None  # changed meanwhile (a commit or drop): this answer, not kept

    def _read(self, prefix: str, known: Loaded | None) -> Loaded | None:
        """The metadata the table's pointer names (`known` when that is the version already held); when it names
        a file that is gone, the newest metadata file there is (None: no pointer, no Iceberg table)."""
        version = self._pointer(prefix)
        if version is None:
            return None
        if known is not None and known.version == version:
            return known
        loaded = self._metadata(prefix, version)
        if loaded is None:  # gone: a drop under way, or retention after another writer's commits
            newest = newest_metadata_version(self.storage, prefix)
            loaded = self._metadata(prefix, newest) if newest is not None else None
        return loaded

    def _metadata(self, prefix: str, version: int) -> Loaded | None:
        path = f"{prefix}/{METADATA}/v{version}.metadata.json"
        try:
            return Loaded(version, self.storage.url(path), self.storage.read_bytes(path))
        except FileNotFoundError:
            return None

    def _pointer(self, prefix: str) -> int | None:
        try:
            text = self.storage.read_bytes(f"{prefix}/{METADATA}/{HINT}").decode("utf-8").strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None
