"""The catalog of a configuration, opened (one per distinct settings, kept by the server's stores)."""
from __future__ import annotations

from dataclasses import replace

from destination.catalogs.catalog_settings import GLUE, REST, SQL, CatalogSettings
from destination.catalogs.publish import Registry
from destination.on_disk.options import APPLIES, DELTA, ICEBERG, TABLE_FORMATS_FIELD, StoreOptions
from destination.runtime.errors import UserActionRequired
from destination.store.versions import Publisher


def open_registry(settings: CatalogSettings, formats: tuple[str, ...] = ()) -> Registry:
    """`formats`: the table formats followed; with Delta Lake among them a catalog that registers Delta tables
    (Glue) registers them too."""
    if settings.kind == SQL:
        from destination.catalogs.sql import SqlCatalog, sql_keeps

        return Registry(SqlCatalog(settings.name, settings.uri), sql_keeps)
    if settings.kind == GLUE:
        from destination.catalogs.glue import GlueCatalog, glue_keeps

        glue = GlueCatalog(settings)
        return Registry(glue, glue_keeps, glue if DELTA in formats else None)
    if settings.kind == REST:
        from destination.catalogs.rest import RestCatalog, rest_keeps

        return Registry(RestCatalog(settings), rest_keeps)
    raise ValueError(f"no catalog of kind {settings.kind!r}")


def check_store_options(settings: CatalogSettings, options: StoreOptions) -> StoreOptions:
    """A catalog registers the Iceberg table: Iceberg must be followed. The entry names the previous version's
    metadata file while the next one commits, so at least two versions are kept (retention_versions 1 → 2)."""
    if not settings.on:
        return options
    if ICEBERG not in APPLIES[options.records.records_format]:
        raise UserActionRequired(f"configuration field 'catalog' is {settings.kind!r}: the catalog registers the "
                                 f"Iceberg table, and tables of records_format {options.records.records_format!r} "
                                 "have no Iceberg metadata; choose records_format parquet or avro, or catalog none")
    if ICEBERG not in options.table_formats:
        raise UserActionRequired(f"configuration field 'catalog' is {settings.kind!r}: the catalog registers the "
                                 f"Iceberg table, so {TABLE_FORMATS_FIELD!r} must include iceberg")
    if options.retention.keep_versions < 2:
        return replace(options, retention=replace(options.retention, keep_versions=2))
    return options


def publisher_for(formats: tuple[str, ...], settings: CatalogSettings) -> Publisher | None:
    """The store's `publish` hook: the formats, then the catalog's entry when one is configured."""
    from destination.table_formats.sync import TableFormatPublisher, table_formats_named

    hook = TableFormatPublisher(table_formats_named(formats)) if formats else None
    if hook is None or not settings.on:
        return hook
    from destination.catalogs.publish import CatalogPublisher

    return CatalogPublisher(hook, open_registry(settings, formats))
