"""The records metadata of a change directory `changes/v<N>/` and its summary `_changes.json`.

- parquet: `_format_parquet`; fields = the table's columns, then `_change_type`, `_commit_version`,
  `_commit_timestamp` (spark/pandas/records-mover read it as any records directory).
- arcion-csv: `_format_delimited` (variant csv, all 13 hints, header-row as configured); every field a
  string: the triplets `<col>__new`, `<col>__old`, `<col>__exists` and `opType`, `cursor`, `operationcount`
  (realtime), or the table's columns (snapshot). The records spec has no null-token hint, so records
  readers see the null token as text; every column is declared a string for that reason.
- arcion-json: JSON Lines declared as delimited text with one string field (`event`, or `row` for a
  snapshot): the field delimiter is U+0001, which JSON text never holds unescaped.

`_changes.json` says what the directory holds (rows or snapshot), in which format, for which table
definition (the types a consumer parses the text with), the counts and the running operation totals.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from destination.changes import cdf
from destination.changes.arcion import realtime_header
from destination.changes.change_settings import ARCION_CSV, ARCION_JSON, PARQUET, ChangeSettings
from destination.model.table_model import TableDef
from destination.on_disk import records

KIND_ROWS, KIND_SNAPSHOT = "rows", "snapshot"
CHANGES_JSON = "_changes.json"
EXTENSIONS = {PARQUET: "parquet", ARCION_CSV: "csv", ARCION_JSON: "jsonl"}
JSON_FIELDS = {KIND_ROWS: "event", KIND_SNAPSHOT: "row"}
ZERO_TOTALS = {"insert": 0, "update": 0, "delete": 0}


def _delimited_hints(settings: ChangeSettings) -> dict[str, Any]:
    """All 13 hints (records-mover writes the merged set, so readers never fall back on defaults)."""
    json_lines = settings.format == ARCION_JSON
    return {
        "header-row": settings.include_header and not json_lines,
        "field-delimiter": "\u0001" if json_lines else ",",
        "record-terminator": "\n",
        "compression": None,
        "quoting": None if json_lines else "minimal",
        "quotechar": '"',
        "doublequote": not json_lines,
        "escape": None,
        "encoding": "UTF8",
        "dateformat": "YYYY-MM-DD",
        "timeonlyformat": "HH24:MI:SS",
        "datetimeformattz": "YYYY-MM-DD HH24:MI:SSOF",
        "datetimeformat": "YYYY-MM-DD HH24:MI:SS",
    }


def format_file(settings: ChangeSettings) -> tuple[str, bytes]:
    if settings.format == PARQUET:
        return records.FORMAT_FILE, b""
    return "_format_delimited", records.dumps({"type": "delimited", "variant": "csv",
                                               "hints": _delimited_hints(settings)})


def _string_fields(names: list[str]) -> dict[str, Any]:
    return {name: {"index": i, "type": "string", "constraints": {"required": False},
                   "representations": {"origin": {"rep_type": "sql/fivetran", "col_ddl": "STRING"}}}
            for i, name in enumerate(names, start=1)}


def schema_json(table: TableDef, settings: ChangeSettings, kind: str) -> dict[str, Any]:
    columns = list(table.columns)
    if settings.format == PARQUET:
        return records.schema_document(records.column_fields([*columns, *cdf.CHANGE_COLUMNS], table))
    if settings.format == ARCION_JSON:
        return records.schema_document(_string_fields([JSON_FIELDS[kind]]))
    names = realtime_header(columns) if kind == KIND_ROWS else [c.name for c in columns]
    return records.schema_document(_string_fields(names))


@dataclass(frozen=True, kw_only=True)
class ChangeFile:
    """One file a task wrote into a change directory (final, or staged for Arcion's second pass)."""

    name: str  # relative to the change directory
    bucket: int | None
    staged: bool
    rows: int
    bytes: int = 0  # final files only
    counts: dict[str, int] = field(default_factory=dict)  # events by operation (or `snapshot` rows)


@dataclass(frozen=True, kw_only=True)
class ChangeParts:
    """What the Spark tasks of a version wrote into its change directory."""

    kind: str  # KIND_ROWS or KIND_SNAPSHOT
    files: tuple[ChangeFile, ...]  # in unit order
    noop_updates: int = 0


@dataclass(frozen=True, kw_only=True)
class ChangeSet:
    """A version's change directory, written by the store before the commit record."""

    kind: str  # KIND_ROWS or KIND_SNAPSHOT
    files: list[tuple[str, int]]  # data files in the order to apply them, with their sizes
    metadata: dict[str, bytes]  # _schema.json, _schema, _format_*, _changes.json
    totals: dict[str, int]  # running operation totals after this version (kept in _table.json)
    summary: dict[str, Any] = field(default_factory=dict)  # for the commit record


def change_set(schema: str, table: TableDef, settings: ChangeSettings, kind: str, version: int, timestamp_us: int,
               files: Sequence[ChangeFile], before: dict[str, int], noop_updates: int) -> ChangeSet:
    """Sum the files' counts into the running totals and build the directory's metadata."""
    counts = dict(ZERO_TOTALS)
    rows = 0
    for f in files:
        for k, v in f.counts.items():
            counts[k] = counts.get(k, 0) + v
        rows += f.rows
    after = {k: before.get(k, 0) + counts.get(k, 0) for k in ZERO_TOTALS}
    summary = {"kind": kind, "format": settings.format, "counts": counts, "noop_updates_left_out": noop_updates}
    doc = {
        "schema": schema, "table": table.name, "version": version, "kind": kind, "format": settings.format,
        "image": settings.image, "null_token": settings.null_token, "include_header": settings.include_header,
        "commit_timestamp_us": timestamp_us, "definition": table.to_json(), "counts": counts,
        "noop_updates_left_out": noop_updates, "operation_totals_before": before, "operation_totals_after": after,
        "files": [f.name for f in files], "rows": rows,
    }
    schema_doc = records.dumps(schema_json(table, settings, kind))
    format_name, format_body = format_file(settings)
    metadata = {records.SCHEMA_JSON: schema_doc, records.SCHEMA_LEGACY: schema_doc, format_name: format_body,
                CHANGES_JSON: records.dumps(doc)}
    return ChangeSet(kind=kind, files=[(f.name, f.bytes) for f in files], metadata=metadata, totals=after,
                     summary=summary)
