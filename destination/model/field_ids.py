"""Each column's field id: the one source of the ids that the data files carry (`PARQUET:field_id`; an Avro file's
fields `field-id`) and that the Iceberg schema names (destination/table_formats/iceberg.py), so a reader mapping
columns by id, not by name, reads the right column.

A data file is written before its version's Iceberg metadata exists, possibly in a Spark task, so the id is a pure
function of the table definition the writer holds: `TableDef.field_ids` are the ids as of the version the definition
was committed in (kept in `_table.json`); `assign` completes them for the definition's columns. A column keeps its
id while its name stays and its type is the same or one Iceberg promotes it to (int → long, float → double, a
decimal widened at the same scale); a new column, a renamed one, or a type Iceberg cannot promote to (STRING → INT)
gets the next id after the highest ever given (`last_field_id`), in column order, `_destination_meta` last. A
new table numbers its columns 1, 2, … in order. A table committed before ids were kept takes them, when loaded, from
its latest Iceberg metadata (`from_iceberg`), so the ids its snapshots and name mapping hold stay the same.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa

from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema, decimal_storage

ICEBERG_HINT = "metadata/version-hint.text"  # the Iceberg writer's layout (destination/table_formats/iceberg.py)
ICEBERG_LEFT_OUT = "fivetran.columns-left-out"
PARQUET_FIELD_ID = b"PARQUET:field_id"  # the Arrow field metadata pyarrow writes as the Parquet field_id
_INTEGERS = {"SHORT": "int", "INT": "int", "LONG": "long"}
_PROMOTIONS = {("int", "long"), ("float", "double")}


def id_type(col: ColumnDef) -> str:
    """The type an id is given for, in Iceberg's terms (what decides whether a type change keeps it)."""
    if col.type == "DECIMAL":
        precision, scale = decimal_storage(col)
        return f"decimal({precision},{scale})"
    if col.type in ("STRING", "JSON", "XML"):
        return "string"
    return _INTEGERS.get(col.type) or col.type.lower()


def keeps_id(old: str, new: str) -> bool:
    """Whether a column whose id was given for type `old` keeps it at type `new` (Iceberg's promotions)."""
    if old == new or (old, new) in _PROMOTIONS:
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        (p_old, s_old), (p_new, s_new) = (tuple(int(x) for x in t[8:-1].split(",")) for t in (old, new))
        return s_old == s_new and p_new >= p_old
    return False


def _all_columns(table: TableDef) -> list[ColumnDef]:
    return [*table.columns, ColumnDef(DESTINATION_META, "STRING")]


def assign(table: TableDef) -> TableDef:
    """`table` with every column's id (`field_ids` complete, in column order, `_destination_meta` last)."""
    given = {name: (field_id, kind) for name, field_id, kind in table.field_ids}
    last = max([table.last_field_id, *(i for i, _ in given.values())])
    entries: list[tuple[str, int, str]] = []
    for col in _all_columns(table):
        kind = id_type(col)
        old = given.get(col.name)
        if old is not None and keeps_id(old[1], kind):
            entries.append((col.name, old[0], kind))
        else:
            last += 1
            entries.append((col.name, last, kind))
    return replace(table, field_ids=tuple(entries), last_field_id=last)


def field_ids(table: TableDef) -> dict[str, int]:
    """Column name → field id, for every column and `_destination_meta`."""
    return {name: field_id for name, field_id, _ in assign(table).field_ids}


def data_file_schema(table: TableDef) -> pa.Schema:
    """The Arrow schema of a data file: `arrow_schema`, each field carrying its field id."""
    ids = field_ids(table)
    schema = arrow_schema(table.columns)
    return pa.schema([f.with_metadata({PARQUET_FIELD_ID: str(ids[f.name]).encode()}) for f in schema])


def from_iceberg(table: TableDef, metadata: dict[str, Any]) -> TableDef:
    """`table` (committed before ids were kept) with the ids its Iceberg metadata `metadata` (the parsed JSON of the
    latest metadata file) gives its columns: the current schema's fields and the columns left out of it (in the
    name mapping), by name; `last_field_id` the metadata's `last-column-id`."""
    schema: dict[str, Any] = next((s for s in metadata.get("schemas", [])
                                   if s.get("schema-id") == metadata.get("current-schema-id")), {"fields": []})
    ids = {f["name"]: int(f["id"]) for f in schema.get("fields", [])}
    ids.update({str(k): int(v) for k, v in json.loads(metadata.get("properties", {}).get(ICEBERG_LEFT_OUT, "{}")).items()})
    given = tuple((c.name, ids[c.name], id_type(c)) for c in _all_columns(table) if c.name in ids)
    return replace(table, field_ids=given, last_field_id=max([int(metadata.get("last-column-id", 0)), *ids.values()]))


def latest_iceberg_metadata(read_bytes: Callable[[str], bytes], prefix: str) -> dict[str, Any] | None:
    """The latest Iceberg metadata of the table at `prefix` (None: none, or unreadable), `read_bytes` the storage's."""
    try:
        number = read_bytes(f"{prefix}/{ICEBERG_HINT}").decode("utf-8").strip()
        found: dict[str, Any] = json.loads(read_bytes(f"{prefix}/metadata/v{int(number)}.metadata.json"))
    except (OSError, ValueError):
        return None
    return found
