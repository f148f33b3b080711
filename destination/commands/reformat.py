"""`records-destination reformat`: move a table to another records format. Every live row of its latest version is
written again in the new format (one Spark task per data file) and committed, with the definition's new format, as
one new version through the commit protocol (a server writing the table meanwhile is one more writer: its commit
first means the move is done again on its version; the move never shows half-done). The next write of the table
writes the new format.

Table formats: Delta Lake describes Parquet tables, Iceberg Parquet and Avro tables, neither a delimited one. A move
to a records format a table format does not describe removes that format's metadata (and, for Iceberg, drops the
`--catalog` entry) after the commit, so that its readers fail rather than read the rows of the last version it
described; because that breaks those readers, the move is refused unless `--drop-table-formats` says so. A format
that describes the new records format goes on (Iceberg from Parquet to Avro: the move's snapshot replaces every data
file) or, when the table had none, is written anew from that version on (and the catalog entry registered).

Change files: the version changes no row, so its change files (in the table's change format, as its latest version
has them) hold no events. Retention is left to the server's next commit: this command retires no version."""
from __future__ import annotations

import math
from collections.abc import Sequence

from destination.catalogs.catalog_settings import CatalogSettings
from destination.catalogs.kinds import open_registry, publisher_for
from destination.catalogs.publish import Registry
from destination.changes.change_settings import ChangeSettings
from destination.changes.replay import version_files
from destination.on_disk.options import DELTA, ICEBERG, TABLE_FORMATS, default_layout, describes
from destination.process.spark_session import get_session
from destination.records_formats.choice import FORMAT_FIELD, HINT_FIELDS, VARIANT_FIELD, records_choice
from destination.runtime.errors import DestinationError, TableNotFound, UserActionRequired
from destination.storage.base import Storage
from destination.store.table_store import Retention, TableStore
from destination.store.versions import TableVersion
from destination.table_formats.sync import table_formats_named
from destination.write.jobs import JobRunner, PlacementSettings
from destination.write.records_format_move import format_text, move_records_format, moved_definition
from destination.write.with_changes import CommitsWithChanges

DROP_OPTION = "--drop-table-formats"
# the move retires nothing: versions older than the latest stay until the server's next commit applies its retention
KEEP_EVERY_VERSION = Retention(keep_versions=1, min_age_seconds=math.inf)


def option_named(field: str) -> str:
    """The command-line option of a records configuration field, for messages."""
    if field in (FORMAT_FIELD, VARIANT_FIELD):
        return "--" + field.replace("_", "-")
    hint = next((h for h, f in HINT_FIELDS.items() if f == field), field)
    return f"--records-hint {hint}"


def choice_fields(records_format: str, variant: str | None, hints: Sequence[str]) -> dict[str, str]:
    """The options as the configuration's records fields (`--records-hint compression=GZIP` → records_compression)."""
    fields = {FORMAT_FIELD: records_format, VARIANT_FIELD: variant or ""}
    for text in hints:
        hint, sep, value = text.partition("=")
        hint = hint.strip().lower().replace("_", "-")
        if not sep or hint not in HINT_FIELDS:
            raise UserActionRequired(f"--records-hint {text!r}: expected HINT=VALUE with HINT one of "
                                     f"{', '.join(HINT_FIELDS)}")
        fields[HINT_FIELDS[hint]] = value
    return fields


def reformat_command(storage: Storage, name: str, fields: dict[str, str], formats: tuple[str, ...],
                     drop_table_formats: bool, catalog: CatalogSettings | None, spark_master: str) -> int:
    schema, sep, table = name.partition(".")
    if not sep or not schema or not table:
        raise UserActionRequired(f"{name!r} is not SCHEMA.TABLE")
    if catalog is not None and ICEBERG not in formats:
        raise UserActionRequired("--catalog registers the Iceberg tables: --table-formats must include iceberg")
    probe = TableStore(storage)
    current = probe.load(schema, table)
    if current is None:
        raise TableNotFound(f"table {schema}.{table} does not exist under {storage.spec.root}")
    try:
        choice = records_choice(fields, named=option_named)
        new = moved_definition(schema, current.table, choice)
    except DestinationError as exc:
        raise type(exc)(f"{schema}.{table}: {exc}") from None
    prefix = probe.table_prefix(schema, table)
    registry = open_registry(catalog, formats) if catalog is not None else None
    dropped = tuple(f for f in TABLE_FORMATS if not describes(f, new.stored_format))
    _check_dropping(storage, prefix, registry, current, new.stored_format, dropped, drop_table_formats)
    # a format the table has is followed too, whatever `--table-formats` says: kept up with the move where it describes the
    # new files (else it would go on describing the version before), removed where it does not
    has = {fmt.name for fmt in table_formats_named(TABLE_FORMATS) if fmt.log(storage, prefix).last is not None}
    followed = tuple(f for f in TABLE_FORMATS if f in formats or f in dropped or f in has)
    store = TableStore(storage, KEEP_EVERY_VERSION, layout=_layout(probe, prefix, current),
                       publish=publisher_for(followed, catalog or CatalogSettings()))
    changes = _change_settings(storage, prefix, current)
    jobs = JobRunner(storage.spec, lambda: get_session(spark_master), changes, PlacementSettings())
    committed = move_records_format(jobs, CommitsWithChanges(store, jobs, changes), schema, table, choice)
    if registry is not None and registry.delta is not None:  # Glue's Delta table, which names the folder
        names = registry.names(schema, table)
        if DELTA in dropped:
            registry.delta.drop_delta(*names, storage.url(prefix))
        elif DELTA in followed and not describes(DELTA, current.table.stored_format):
            registry.delta.register_delta(*names, storage.url(prefix))  # back in Parquet: the Iceberg entry stayed
    print(f"{schema}.{table}: version {committed.version} holds its {committed.rows} rows in records format "
          f"{format_text(committed.table)} (was {format_text(current.table)}, version {committed.version - 1})")
    return 0


def _check_dropping(storage: Storage, prefix: str, registry: Registry | None, current: TableVersion,
                    target: str, dropped: tuple[str, ...], drop: bool) -> None:
    """Refuse (unless `drop`) a move to records format `target`, which the table formats `dropped` do not describe,
    of a table with metadata of one of them or (Iceberg) a catalog entry: the move removes them, and their readers
    then fail."""
    table = f"{current.schema}.{current.table.name}"
    found = [f"{fmt.name} ({', '.join(f + '/' for f in fmt.folders)})" for fmt in table_formats_named(dropped)
             if fmt.log(storage, prefix).last is not None]
    if (ICEBERG in dropped and registry is not None
            and registry.catalog.location(*registry.names(current.schema, current.table.name))):
        found.append(f"the {registry.catalog.described} entry")
    if found and not drop:
        raise UserActionRequired(
            f"table {table}: {target} tables have no {' or '.join(dropped)} metadata, and the table has "
            f"{' and '.join(found)}; moving it removes them (their readers then fail instead of reading old rows). "
            f"Pass {DROP_OPTION} to move it anyway; nothing was changed")


def _layout(store: TableStore, prefix: str, current: TableVersion) -> str:
    """The layout the table's latest version was committed in (the move rewrites every file: it carries none)."""
    layout = store.commit_record(prefix, current.version).get("layout")
    return str(layout) if layout else default_layout(store.storage.spec.is_s3)


def _change_settings(storage: Storage, prefix: str, current: TableVersion) -> ChangeSettings:
    """The change files of the table's latest version, as the move's version writes them: none when it has none."""
    try:
        about = version_files(storage, prefix, current.version).about
    except DestinationError:  # MissingChanges: the latest version has no change files
        return ChangeSettings()
    return ChangeSettings(format=str(about["format"]), image=str(about["image"]), null_token=str(about["null_token"]),
                          include_header=bool(about["include_header"]))
