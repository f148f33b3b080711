"""At the server's start, in the background: every table of its `--root` whose formats (or catalog entry) a server
killed right after a records commit left behind is brought up to its latest committed version.

A table follows the formats it already has (a `_delta_log/`, a `metadata/`: the configuration that wrote it is not
known before its next request), and the catalog of `serve --catalog CONFIGURATION_JSON` when one is given. Nothing
is retired here (retention follows the configuration, which only requests carry). Each table is caught up under its
lock (a request for it waits); the pass stops at the server's stop or after MAX_SECONDS, and logs one line.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from destination.catalogs.catalog_settings import CatalogSettings
from destination.catalogs.kinds import publisher_for
from destination.on_disk.options import TABLE_FORMATS
from destination.runtime import logs
from destination.runtime.errors import StorageError
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.table_formats.sync import oldest_retained, table_formats_named

MAX_SECONDS = 600.0

Lock = Callable[[str, str], AbstractContextManager[None]]


def catch_up_root(storage: Storage, catalog: CatalogSettings, lock: Lock, stopping: threading.Event,
                  max_seconds: float = MAX_SECONDS) -> tuple[int, int]:
    """Catch every table up; returns (tables checked, tables that failed)."""
    store = TableStore(storage)
    deadline = time.monotonic() + max_seconds
    checked = failed = 0
    for schema, table in _tables(store):
        if stopping.is_set() or time.monotonic() > deadline:
            logs.info(f"start-up catch-up stopped after {checked} tables (server stopping or {max_seconds:g}s spent)")
            break
        checked += 1
        try:
            with lock(schema, table):
                latest = store.load(schema, table)
                if latest is None:
                    continue
                followed = tuple(fmt.name for fmt in table_formats_named(TABLE_FORMATS)
                                 if fmt.log(storage, latest.prefix).last is not None)
                hook = publisher_for(followed, catalog)
                if hook is not None:
                    hook(store, latest.prefix, latest, oldest_retained(store, latest.prefix, latest.version))
        except Exception as exc:  # logged by the hook when it is the catalog's; the next request retries it
            failed += 1
            logs.warning(f"start-up catch-up of {schema}.{table} failed: {type(exc).__name__}: {exc}")
    return checked, failed


def _tables(store: TableStore) -> Iterator[tuple[str, str]]:
    for schema in store.list_schemas():
        for table in store.list_tables(schema):
            yield schema, table


def start_catch_up(spec: StorageSpec, catalog: CatalogSettings, lock: Lock, stopping: threading.Event) -> threading.Thread:
    """The pass in a thread of its own. The root is opened there too: a root that cannot be opened (not writable,
    under a file) must not stop the server, whose health check reports it and waits for it to be fixed."""
    def run() -> None:
        started = time.monotonic()
        try:
            storage = open_storage(spec)
        except StorageError:  # the health check's WARNING says why, once; the next request catches its table up
            logs.info(f"start-up catch-up of {spec.root} skipped: the root cannot be opened (see the health check)")
            return
        try:
            checked, failed = catch_up_root(storage, catalog, lock, stopping)
        except Exception as exc:  # the root unopenable or unreadable: the health check and requests say so
            logs.warning(f"start-up catch-up of {spec.root} failed: {type(exc).__name__}: {exc}")
            return
        logs.info(f"start-up catch-up: {checked} tables of {spec.root} checked, {failed} failed, "
                  f"in {time.monotonic() - started:.1f}s")

    thread = threading.Thread(target=run, name="startup-catch-up", daemon=True)
    thread.start()
    return thread
