"""`records-destination publish` (once `formats`): bring the Delta Lake and Iceberg metadata of existing tables up to
their committed versions, or rebuild it from them (`--rebuild`: the formats' folders are cleared first). Run it when no server is
writing the tables: a write in between would be caught up by the next write anyway. `--catalog FILE` also registers
every table in the catalog of a configuration file, or moves its entry to the latest version."""
from __future__ import annotations

from destination.catalogs.catalog_settings import CatalogSettings
from destination.catalogs.kinds import open_registry
from destination.catalogs.publish import point_entry
from destination.on_disk.options import DELTA, describes
from destination.runtime.errors import DestinationError
from destination.storage.base import Storage
from destination.store.table_store import TableStore
from destination.table_formats.sync import BuiltVersions, applies, bring_up_to_date, oldest_retained, table_formats_named
from destination.table_formats.version import ICEBERG


def publish_command(storage: Storage, name: str | None, formats: tuple[str, ...], rebuild: bool,
                    catalog: CatalogSettings | None = None) -> int:
    """`catalog`: also register each table there, or move its entry to the latest version (a catalog added
    later, or an entry left behind by an outage)."""
    store = TableStore(storage)
    registry = open_registry(catalog, formats) if catalog is not None else None
    if registry is not None and ICEBERG not in formats:
        print("error: --catalog registers the Iceberg tables: --table-formats must include iceberg")
        return 2
    tables = [tuple(name.split(".", 1))] if name else [(s, t) for s in store.list_schemas() for t in store.list_tables(s)]
    if any(len(t) != 2 for t in tables):
        print(f"error: {name!r} is not SCHEMA.TABLE")
        return 2
    failed = 0
    for schema, table in tables:
        try:
            latest = store.load(schema, table)
            if latest is None:
                print(f"{schema}.{table}: no committed version")
                continue
            prefix = store.table_prefix(schema, table)
            oldest = oldest_retained(store, prefix, latest.version)
            chosen = table_formats_named(formats)
            if rebuild:  # every format's folders first: the versions built below are shared by the formats
                for folder in {folder for fmt in chosen for folder in fmt.folders}:
                    storage.delete_prefix(f"{prefix}/{folder}")
            built = BuiltVersions()  # each version's change data written once for both formats
            for fmt in chosen:
                done = bring_up_to_date(store, prefix, fmt, latest, oldest, built)
                if not applies(fmt, latest):
                    print(f"{schema}.{table}: no {fmt.name} metadata (records format {latest.table.stored_format})")
                    continue
                print(f"{schema}.{table}: {fmt.name} at version {latest.version} ({done} version(s) written)")
            if registry is not None:
                named = point_entry(registry, storage, prefix, schema, latest.table)
                if registry.delta is not None:
                    names = registry.names(schema, table)
                    if describes(DELTA, latest.table.stored_format):
                        registry.delta.register_delta(*names, storage.url(prefix))  # registered before Delta was on
                    else:  # no Delta Lake for an Avro or delimited table: an entry left by a move goes
                        registry.delta.drop_delta(*names, storage.url(prefix))
                print(f"{schema}.{table}: {registry.catalog.described} entry at version {named}")
        except DestinationError as exc:
            print(f"{schema}.{table}: error: {exc}")
            failed += 1
    return 1 if failed else 0
