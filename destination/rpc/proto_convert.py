"""Protobuf ⇄ domain conversions (the only place that reads proto table definitions)."""
from __future__ import annotations

from destination.batch_files.reader import FileFormat
from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import normalize_column
from destination.protocol import common, sdk
from destination.runtime.errors import BadRequest


def table_from_proto(table: common.Table) -> TableDef:
    if not table.name:
        raise BadRequest("the request has no table name")
    columns: list[ColumnDef] = []
    seen: set[str] = set()
    for col in table.columns:
        if col.name in seen:
            raise BadRequest(f"table {table.name!r}: column {col.name!r} appears twice")
        if col.name == DESTINATION_META:
            raise BadRequest(f"table {table.name!r}: column name {DESTINATION_META!r} is reserved by this destination")
        seen.add(col.name)
        type_name = common.DataType.Name(col.type) if col.type in common.DataType.values() else str(col.type)
        if type_name == "UNSPECIFIED":
            raise BadRequest(f"table {table.name!r}: column {col.name!r} has no data type")
        precision = scale = None
        byte_length = None
        if col.HasField("params"):
            if col.params.HasField("decimal"):
                precision, scale = col.params.decimal.precision, col.params.decimal.scale
            elif col.params.HasField("string_byte_length"):
                byte_length = col.params.string_byte_length
        columns.append(normalize_column(ColumnDef(col.name, type_name, col.primary_key, precision, scale, byte_length)))
    return TableDef(name=table.name, columns=tuple(columns))


def table_to_proto(table: TableDef) -> common.Table:
    out = common.Table(name=table.name)
    for col in table.columns:
        c = out.columns.add(name=col.name, type=common.DataType.Value(col.type), primary_key=col.primary_key)
        if col.type == "DECIMAL":
            c.params.decimal.precision = col.precision or 0
            c.params.decimal.scale = col.scale or 0
        elif col.string_byte_length is not None:
            c.params.string_byte_length = col.string_byte_length
    return out


def file_format(params: sdk.FileParams) -> FileFormat:
    """The request's file parameters (the files' kind, CSV or Parquet, is decided by destination.write.batches)."""
    return FileFormat(
        encrypted=params.encryption == sdk.Encryption.Value("AES"),
        compression=sdk.Compression.Name(params.compression),
        null_string=params.null_string,
        unmodified_string=params.unmodified_string,
    )
