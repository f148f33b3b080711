"""One interface over the records formats' codecs: what a data file is written as, read back from, named, and
which `_format_*` file describes it."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa

from destination.model.table_model import TableDef
from destination.records_formats import avro, delimited, hints
from destination.runtime.errors import BadRequest

RECORDS_FORMATS = ("parquet", "avro", "delimited")


@dataclass(frozen=True)
class Codec:
    """A records format with its variant and complete hints (delimited only)."""
    records_format: str
    variant: str | None = None
    hints: hints.Hints = field(default_factory=dict)

    @property
    def format_file(self) -> str:
        return f"_format_{self.records_format}"

    def format_content(self) -> bytes:
        """`_format_*`'s bytes: empty for the simple form, the detailed form's JSON for delimited."""
        if self.records_format != "delimited":
            return b""
        return json.dumps(hints.format_document(str(self.variant), self.hints), indent=1).encode("utf-8")

    @property
    def suffix(self) -> str:
        """The data file name's suffix, as records-mover names its files."""
        if self.records_format == "delimited":
            return delimited.suffix(self.hints)
        return ".avro" if self.records_format == "avro" else ".parquet"

    def check(self, table_def: TableDef) -> None:
        """Refuse, at configuration time, a table this format cannot hold."""
        if self.records_format == "avro":
            avro.check(table_def)
        elif self.records_format == "delimited":
            delimited.check(table_def, self.hints)

    def write(self, table: pa.Table, table_def: TableDef, out: BinaryIO) -> pa.Table:
        """Write one data file; returns the rows as stored (delimited: values it cannot hold NULLed and recorded)."""
        if self.records_format == "avro":
            return avro.write(table, table_def, out)
        if self.records_format == "delimited":
            return delimited.write(table, table_def, out, self.hints)
        raise BadRequest(f"records_format {self.records_format!r}: the Parquet writer is the data-file writer's")

    def as_stored(self, table: pa.Table, table_def: TableDef) -> pa.Table:
        """`table`'s rows as `write` stores them (delimited: values it cannot hold NULLed and recorded); Parquet and
        Avro store every value as it is."""
        if self.records_format == "delimited":
            return delimited.as_stored(table, table_def, self.hints)
        return table

    def unheld(self, table: pa.Table, table_def: TableDef) -> dict[str, int]:
        """Column → how many of `table`'s values this format would not store as they are (delimited variants: empty
        text and binary, characters they cannot write); Parquet and Avro hold every value."""
        if self.records_format == "delimited":
            return delimited.unheld_values(table, table_def, self.hints)
        return {}

    def read(self, src: BinaryIO, table_def: TableDef) -> pa.Table:
        if self.records_format == "avro":
            return avro.read(src, table_def)
        if self.records_format == "delimited":
            return delimited.read(src, table_def, self.hints)
        raise BadRequest(f"records_format {self.records_format!r}: read Parquet with pyarrow")


def codec(records_format: str = "parquet", variant: str | None = None,
          overrides: Mapping[str, Any] | None = None) -> Codec:
    """The codec of a configuration (`records_format`, `records_variant`, hint overrides), checked."""
    if records_format not in RECORDS_FORMATS:
        raise BadRequest(f"records_format {records_format!r}: unknown; choose one of {', '.join(RECORDS_FORMATS)}")
    if records_format != "delimited":
        if variant is not None or overrides:
            raise BadRequest(f"records_format {records_format!r}: records_variant and hints apply to delimited only")
        return Codec(records_format)
    if variant is None:
        raise BadRequest("records_format 'delimited' needs records_variant (bluelabs, csv, bigquery or vertica)")
    return Codec("delimited", variant, hints.resolve(variant, overrides))


def table_codec(table_def: TableDef) -> Codec:
    """The codec a table's data files are written and read with (its definition keeps the format, fixed when it
    was created; the hints kept are complete)."""
    if table_def.stored_format != "delimited":
        return Codec(table_def.stored_format)
    return Codec("delimited", table_def.records_variant, dict(table_def.records_hints))


def format_of_name(name: str) -> str:
    """The records format of a data file, by its name's suffix (records-mover's names)."""
    if name.endswith(".avro"):
        return "avro"
    if ".csv" in name.rsplit("/", 1)[-1]:
        return "delimited"
    return "parquet"
