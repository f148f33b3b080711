"""Builders for the records-directory metadata files (records spec, schema v1, Redshift manifest)."""
from __future__ import annotations

import json
from typing import Any

from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import meta_records_field, records_field

FORMAT_FILE = "_format_parquet"
FORMAT_FILES = (FORMAT_FILE, "_format_avro", "_format_delimited")  # one per version: its records format's
MANIFEST = "_manifest"
SCHEMA_JSON = "_schema.json"
SCHEMA_LEGACY = "_schema"  # the records spec's name; same JSON (records-mover prefers _schema.json)
FILES_JSON = "_files.json"
TABLE_JSON = "_table.json"
METADATA_FILES = (SCHEMA_JSON, SCHEMA_LEGACY, FORMAT_FILE, FILES_JSON, TABLE_JSON)  # of a Parquet table's version


def metadata_files(format_file: str = FORMAT_FILE) -> tuple[str, ...]:
    """The metadata files of a version whose records format is described by `format_file`."""
    return tuple(format_file if name == FORMAT_FILE else name for name in METADATA_FILES)


def schema_document(fields: dict[str, Any]) -> dict[str, Any]:
    """A records schema v1 document; `fields` in file column order with `index` 1..n."""
    return {"schema": "bltypes/v1", "fields": fields, "known_representations": {"origin": {"type": "sql/fivetran"}}}


def column_fields(columns: list[ColumnDef], table: TableDef) -> dict[str, Any]:
    """Schema fields of `columns` (the table's own, then any others), numbered from 1."""
    keys = table.key_columns if any(c.primary_key for c in table.columns) else []
    return {col.name: records_field(col, i, single_key=len(keys) == 1) for i, col in enumerate(columns, start=1)}


def schema_json(table: TableDef) -> dict[str, Any]:
    """records schema v1 of a data file: the table's columns, `_destination_meta` last."""
    fields = column_fields(list(table.columns), table)
    fields[DESTINATION_META] = meta_records_field(len(table.columns) + 1)
    return schema_document(fields)


def manifest_json(entries: list[tuple[str, int]]) -> dict[str, Any]:
    """Redshift manifest: absolute URLs, mandatory, content_length (required for Parquet COPY)."""
    return {"entries": [{"url": url, "mandatory": True, "meta": {"content_length": size}} for url, size in entries]}


def dumps(data: Any) -> bytes:
    return json.dumps(data, indent=1, ensure_ascii=False).encode("utf-8")
