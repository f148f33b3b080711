"""The catalog step after each records commit: the formats follow the commit (destination/table_formats/sync.py),
then the table's catalog entry is moved to the newest Iceberg metadata file (registered when it has none). The same
step catches up an entry left behind (a crash between the records commit and the entry's move, a catalog outage):
after the next commit of the table, on the next request for it (destination/rpc/service.py), at the server's
start and by `records-destination publish --catalog`.

Retention never deletes the metadata file an entry names, nor the data files of its snapshot: the formats retire
no version at or after the one the entry names, and while the entry is behind the oldest version retention would
keep (or the catalog cannot be read), nothing retires.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from destination.catalogs.catalog import Catalog, DeltaEntries, ForeignEntry, catalog_name, foreign_entry
from destination.model.table_model import TableDef
from destination.on_disk.options import DELTA, ICEBERG, describes
from destination.runtime import logs, phases
from destination.storage.base import Storage
from destination.store.table_store import TableStore
from destination.store.versions import Publisher, TableVersion
from destination.table_formats.iceberg import METADATA, IcebergFormat

KEEP_ALL = 1  # the oldest version the formats are told to keep while the entry's version is unknown: every one


@dataclass(frozen=True)
class Registry:
    """A catalog and the name rule of its kind (`keeps`: the characters its names hold as they are); `delta`: the
    same catalog when it registers the Delta tables too (Glue with Delta Lake on)."""

    catalog: Catalog
    keeps: Callable[[str], bool]
    delta: DeltaEntries | None = None

    def names(self, schema: str, table: str) -> tuple[str, str]:
        return (catalog_name(schema, self.keeps, "schema name"), catalog_name(table, self.keeps, "table name"))


def metadata_location(storage: Storage, prefix: str, version: int) -> str:
    return storage.url(f"{prefix}/{METADATA}/v{version}.metadata.json")


def named_version(location: str | None, storage: Storage, prefix: str) -> int | None:
    """The records version of the table's metadata file `location` names; None: no entry, or one naming a file
    that is not this table's."""
    if location is None:
        return None
    folder = storage.url(f"{prefix}/{METADATA}").rstrip("/") + "/v"
    number = location[len(folder):-len(".metadata.json")] if location.startswith(folder) else ""
    return int(number) if number.isdigit() and location.endswith(".metadata.json") else None


def our_location(catalog: Catalog, storage: Storage, prefix: str, namespace: str, name: str,
                 dropping: bool = False) -> str | None:
    """The metadata file the table's entry names; None: no entry. An entry naming a file outside the table's folder
    is another table's (another tool's, or another root's): a Task naming it, and it is never moved or deleted.
    (A `rest` catalog writes metadata files of its own: a move checks its entries itself, rest.py, and takes an
    empty one the catalog made; an entry it drops must name the table's own file, as every entry it committed to
    does.)"""
    current = catalog.location(namespace, name)
    if (current is not None and (catalog.names_our_files or dropping)
            and named_version(current, storage, prefix) is None):
        raise foreign_entry(catalog.described, f"{namespace}.{name}",
                            f"it names {current}, outside the table's folder {storage.url(prefix)}")
    return current


def point_entry(registry: Registry, storage: Storage, prefix: str, schema: str, table: TableDef) -> int | None:
    """Move the table's entry to the newest Iceberg metadata file, or register it; never back to an older one (a
    writer ahead moved it). Returns the version the entry names afterwards (None: no metadata file yet)."""
    last = IcebergFormat().log(storage, prefix).last
    if last is None:
        return None
    catalog = registry.catalog
    namespace, name = registry.names(schema, table.name)
    location = metadata_location(storage, prefix, last)
    for _ in range(3):  # another writer may move the entry between our read and our move
        current = our_location(catalog, storage, prefix, namespace, name)
        named = named_version(current, storage, prefix)
        if current == location or (named is not None and named > last):
            return named
        if current is None:
            # first: an Iceberg entry is only made with the Delta one in place (an Avro table has no Delta Lake)
            if registry.delta is not None and describes(DELTA, table.stored_format):
                registry.delta.register_delta(namespace, name, storage.url(prefix))
            catalog.register(namespace, name, location, table)
            continue  # read back: registered by us, or by another writer meanwhile
        if catalog.advance(namespace, name, location, current, table):
            logs.info(f"{schema}.{table.name}: {catalog.described} entry moved to version {last}")
            return last
    return named_version(our_location(catalog, storage, prefix, namespace, name), storage, prefix)


class CatalogPublisher:
    """The store's `publish` hook with a catalog: the formats' hook (None: formats off but Iceberg's, which the
    catalog reads), then the entry's move. A catalog fault is raised after the formats followed (the records
    version stands; the request answers UNAVAILABLE or a Task, and its retry catches the entry up)."""

    def __init__(self, formats: Publisher, registry: Registry) -> None:
        self.formats = formats
        self.registry = registry

    def __call__(self, store: TableStore, prefix: str, committed: TableVersion, oldest_retained: int) -> bool:
        catalog = self.registry.catalog
        namespace, name = self.registry.names(committed.schema, committed.table.name)
        if not describes(ICEBERG, committed.table.stored_format):
            return self._without_iceberg(store, prefix, committed, oldest_retained)
        fault: Exception | None = None
        try:
            with phases.timed("catalog"):
                named = named_version(our_location(catalog, store.storage, prefix, namespace, name), store.storage,
                                      prefix)
            kept = oldest_retained if named is None else min(oldest_retained, named)
        except Exception as exc:  # unknown: keep every version the catalog might name; raised below
            fault, kept = exc, KEEP_ALL
        followed = self.formats(store, prefix, committed, kept)
        if fault is None:
            store.fault_point("before_catalog")
            try:
                with phases.timed("catalog"):
                    point_entry(self.registry, store.storage, prefix, committed.schema, committed.table)
            except Exception as exc:
                fault = exc
        if fault is not None:
            logs.warning(f"{committed.schema}.{committed.table.name}: version {committed.version} is committed but "
                         f"the {catalog.described} entry was not moved to it ({fault}); the next request for the "
                         "table, or `records-destination publish --catalog`, moves it")
            raise fault
        return followed and kept >= oldest_retained

    def _without_iceberg(self, store: TableStore, prefix: str, committed: TableVersion, oldest_retained: int) -> bool:
        """A table moved to delimited files (`records-destination reformat`) has no Iceberg metadata, so no entry:
        one left from its earlier versions is dropped (first: it names metadata the formats' step removes)."""
        fault: Exception | None = None
        try:
            with phases.timed("catalog"):
                self._drop_entries(store.storage, prefix, committed.schema, committed.table.name, with_delta=False)
        except Exception as exc:  # raised after the formats followed, as in __call__
            fault = exc
        followed = self.formats(store, prefix, committed, oldest_retained)
        if fault is not None:
            logs.warning(f"{committed.schema}.{committed.table.name}: version {committed.version} has no Iceberg metadata but "
                         f"its {self.registry.catalog.described} entry was not dropped ({fault}); the next request "
                         "for the table drops it")
            raise fault
        return followed

    def dropped(self, store: TableStore, schema: str, table: str) -> None:
        """The table is being dropped: its entry goes first (a reader never finds an entry naming deleted files;
        a fault leaves the table as it was, for the retry)."""
        self.formats.dropped(store, schema, table)
        self._drop_entries(store.storage, store.table_prefix(schema, table), schema, table, with_delta=True)

    def _drop_entries(self, storage: Storage, prefix: str, schema: str, table: str, with_delta: bool) -> None:
        """Drop the table's entries that are ours; another's entry of the name stays as it is (a warning: the table
        it names is not the one dropped). `with_delta`: the Delta entry too when there is no Iceberg one."""
        namespace, name = self.registry.names(schema, table)
        catalog = self.registry.catalog
        try:
            ours = our_location(catalog, storage, prefix, namespace, name, dropping=True) is not None
        except ForeignEntry as foreign:
            logs.warning(f"{schema}.{table}: {foreign}")
            ours = False
        if ours:
            catalog.drop(namespace, name)
        if self.registry.delta is not None and (ours or with_delta):
            self.registry.delta.drop_delta(namespace, name, storage.url(prefix))
        if ours:
            logs.info(f"{schema}.{table}: {catalog.described} entry dropped")
