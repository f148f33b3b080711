"""Avro data files (records spec `avro`, simple `_format_avro`), typed as Airbyte's S3 1.0 output schema types them.

| Fivetran        | Avro (every field `["null", T]`, default null)              |
|-----------------|-------------------------------------------------------------|
| BOOLEAN         | boolean                                                     |
| SHORT / INT     | int                                                         |
| LONG            | long                                                        |
| FLOAT / DOUBLE  | float / double                                              |
| DECIMAL(p,s)    | bytes, logicalType decimal, precision/scale of the storage  |
| NAIVE_DATE      | int, logicalType date                                       |
| NAIVE_TIME      | long, logicalType time-micros                               |
| NAIVE_DATETIME  | long, logicalType timestamp-micros, adjust-to-utc false     |
| UTC_DATETIME    | long, logicalType timestamp-micros, adjust-to-utc true      |
| BINARY          | bytes                                                       |
| STRING/JSON/XML | string; `_destination_meta` too                             |

Timestamps are typed as Airbyte types them and as Iceberg's Avro spec does (`adjust-to-utc` tells a timestamp without
zone from one in UTC; Iceberg's Java reader refuses `local-timestamp-micros`, which files written before used and
are still read). A reader that ignores `adjust-to-utc` (fastavro) reads a NAIVE_DATETIME as that time in UTC.
Blocks are deflate-compressed (ISA-L; snappy would need a further package). polars writes the rows as the plain
types of the logical ones and the header names the logical types (avro_encode.py); they are read back a block at a
time by polars, typed as fastavro's logical types type them (avro_decode.py; fastavro itself for a file that reader
cannot type exactly), so every value the Arrow types hold round-trips exactly.
Field names must be Avro names; a table with another name is refused.
"""
from __future__ import annotations

import io
import re
from typing import Any, BinaryIO

import fastavro
import pyarrow as pa

from destination.model.field_ids import field_ids
from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema, decimal_storage
from destination.records_formats import avro_decode, avro_encode
from destination.runtime.errors import BadRequest

FORMAT_FILE = "_format_avro"
SUFFIX = ".avro"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLAIN: dict[str, Any] = {
    "BOOLEAN": "boolean", "SHORT": "int", "INT": "int", "LONG": "long", "FLOAT": "float", "DOUBLE": "double",
    "NAIVE_DATE": {"type": "int", "logicalType": "date"},
    "NAIVE_TIME": {"type": "long", "logicalType": "time-micros"},
    "NAIVE_DATETIME": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False},
    "UTC_DATETIME": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True},
    "BINARY": "bytes", "STRING": "string", "JSON": "string", "XML": "string",
}


def check(table_def: TableDef) -> None:
    """Refuse a table whose column names Avro cannot name (configuration time)."""
    for col in table_def.columns:
        if not _NAME.match(col.name):
            raise BadRequest(f"table {table_def.name!r}, column {col.name!r}: not an Avro field name "
                             "(letters, digits and _, not starting with a digit); the avro format cannot hold it")


def _avro_type(col: ColumnDef) -> Any:
    if col.type == "DECIMAL":
        precision, scale = decimal_storage(col)
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return _PLAIN[col.type]


def avro_schema(table_def: TableDef) -> dict[str, Any]:
    """The writer schema: the table's columns in order, then `_destination_meta`, all nullable, each field with
    its `field-id` (the attribute Iceberg's Avro readers map columns by; destination/model/field_ids.py)."""
    check(table_def)
    ids = field_ids(table_def)
    fields = [{"name": c.name, "type": ["null", _avro_type(c)], "default": None, "field-id": ids[c.name]}
              for c in table_def.columns]
    fields.append({"name": DESTINATION_META, "type": ["null", "string"], "default": None,
                   "field-id": ids[DESTINATION_META]})
    return {"type": "record", "name": "row", "fields": fields}


def write(table: pa.Table, table_def: TableDef, out: BinaryIO) -> pa.Table:
    """Write `table` (the data-file schema: columns, then `_destination_meta`) as one Avro file; returns it."""
    table = table.select([f.name for f in arrow_schema(list(table_def.columns))])
    avro_encode.write_file(out, avro_schema(table_def), table)
    return table


def read(src: BinaryIO, table_def: TableDef) -> pa.Table:
    """Read an Avro file written by `write` back into the data-file Arrow table, value for value."""
    target = arrow_schema(list(table_def.columns))
    raw = src.read()
    fast = avro_decode.read(raw, avro_schema(table_def), target)
    if fast is not None:
        return fast
    return _read_exactly(raw, table_def, target)


def _read_exactly(raw: bytes, table_def: TableDef, target: pa.Schema) -> pa.Table:
    """fastavro's reading, row by row (about fifteen times avro_decode's time): the reference for the files the fast
    reader leaves to it, and the one that names what is wrong with a file that is not the table's."""
    try:
        reader = fastavro.reader(io.BytesIO(raw), reader_schema=avro_schema(table_def))
        writer_schema: Any = reader.writer_schema
        found = [f["name"] for f in writer_schema["fields"]]
        if found != target.names:  # schema resolution would fill the table's other columns with NULL
            raise ValueError(f"its columns {found!r} are not the table's {target.names!r}")
        rows: list[Any] = list(reader)
    except (ValueError, EOFError, KeyError, TypeError, fastavro.read.SchemaResolutionError) as e:
        raise BadRequest(f"table {table_def.name!r}: an Avro data file does not read as the table's rows: "
                         f"{type(e).__name__}: {e}") from None
    # fastavro returns the logical types as Python values (date, time, datetime, Decimal): Arrow takes them exactly
    arrays = []
    for f in target:
        try:
            arrays.append(pa.array([r[f.name] for r in rows], f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # their messages quote the value: row data
            raise BadRequest(f"table {table_def.name!r}, column {f.name!r}: an Avro data file holds a value the "
                             f"column's type cannot ({f.type})") from None
    return pa.Table.from_arrays(arrays, schema=target)
