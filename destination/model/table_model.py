"""The destination's own view of a table definition, independent of protobuf.

Frozen dataclasses so a definition can be compared (CreateTable retries), hashed,
stored in `_table.json` and shipped to Spark tasks.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

SYNCED = "_fivetran_synced"
DELETED = "_fivetran_deleted"
FIVETRAN_ID = "_fivetran_id"
START = "_fivetran_start"
END = "_fivetran_end"
ACTIVE = "_fivetran_active"
DESTINATION_META = "_destination_meta"  # internal: per-row version + captured conversion failures

DEFAULT_DECIMAL = (38, 10)
MAX_DECIMAL_PRECISION = 76  # Arrow decimal256 / Parquet; beyond 38 digits Redshift and Spark cannot read it


@dataclass(frozen=True)
class ColumnDef:
    name: str
    type: str  # a Fivetran DataType name, e.g. "DECIMAL"
    primary_key: bool = False
    precision: int | None = None  # DECIMAL only
    scale: int | None = None  # DECIMAL only
    string_byte_length: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "primary_key": self.primary_key}
        if self.precision is not None:
            out["precision"] = self.precision
            out["scale"] = self.scale
        if self.string_byte_length is not None:
            out["string_byte_length"] = self.string_byte_length
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> ColumnDef:
        return ColumnDef(
            name=data["name"], type=data["type"], primary_key=bool(data.get("primary_key", False)),
            precision=data.get("precision"), scale=data.get("scale"),
            string_byte_length=data.get("string_byte_length"),
        )

    def ddl(self) -> str:
        """The exact Fivetran type, e.g. `DECIMAL(38,10)`, as kept in `_schema.json`."""
        if self.type == "DECIMAL":
            return f"DECIMAL({self.precision},{self.scale})"
        if self.string_byte_length is not None:
            return f"{self.type}({self.string_byte_length})"
        return self.type


KEY_RANGES, HASH_BUCKETS = "key-ranges", "hash-buckets"
PARQUET = "parquet"
AVRO = "avro"  # the records formats Iceberg metadata may describe (destination/on_disk/options.py APPLIES)


@dataclass(frozen=True)
class TableDef:
    name: str
    columns: tuple[ColumnDef, ...]
    # how the rows are placed in data files: KEY_RANGES (sorted, non-overlapping key ranges; every table created
    # since placement by key ranges) or HASH_BUCKETS (16 key-hash buckets; older tables, placed anew by their first
    # write: destination/write/table_writes.py `place_in_ranges`)
    placement: str = "key-ranges"
    bucket_count: int = 16  # HASH_BUCKETS only
    # the columns' field ids as of the version this definition was committed in (destination/model/field_ids.py):
    # (name, id, the type the id was given for); kept in `_table.json`, not part of the comparison (a requested
    # definition has none). `last_field_id`: the highest id ever given in the table (ids are never reused)
    field_ids: tuple[tuple[str, int, str], ...] = field(default=(), compare=False)
    last_field_id: int = field(default=0, compare=False)
    # the records format of the table's data files, fixed when it is created (destination/records_formats/
    # choice.py): "" in a requested definition (CreateTable stamps the configured one), "parquet" for tables
    # created before the choice existed; delimited tables keep their variant and complete hints. Not compared: a
    # table keeps its format whatever later requests carry
    records_format: str = field(default="", compare=False)
    records_variant: str | None = field(default=None, compare=False)
    records_hints: tuple[tuple[str, str | bool | None], ...] = field(default=(), compare=False)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def key_columns(self) -> list[str]:
        """The primary key; a table without one is keyed by all its non-system columns."""
        keys = [c.name for c in self.columns if c.primary_key]
        if keys:
            return keys
        return [c.name for c in self.columns if not c.name.startswith("_fivetran_")] or self.column_names

    @property
    def entity_key(self) -> list[ColumnDef]:
        """The columns that identify a row; for a history table, the entity: its key without `_fivetran_start`,
        so that every version of a row lands in one bucket and matches its earliest-start and delete rows."""
        names = [n for n in self.key_columns if not (self.is_history and n == START)]
        return [c for c in self.columns if c.name in names]

    @property
    def is_history(self) -> bool:
        return any(c.name == START and c.primary_key for c in self.columns)

    def column(self, name: str) -> ColumnDef | None:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def with_columns(self, columns: list[ColumnDef]) -> TableDef:
        return replace(self, columns=tuple(columns))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "columns": [c.to_json() for c in self.columns],
                               "placement": self.placement}
        if self.placement == HASH_BUCKETS:
            out["bucket_count"] = self.bucket_count
        if self.field_ids:
            out["field_ids"] = [list(entry) for entry in self.field_ids]
            out["last_field_id"] = self.last_field_id
        if self.records_format not in ("", PARQUET):
            out["records_format"] = self.records_format
            if self.records_variant is not None:
                out["records_variant"] = self.records_variant
                out["records_hints"] = dict(self.records_hints)
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> TableDef:
        return TableDef(name=data["name"], columns=tuple(ColumnDef.from_json(c) for c in data["columns"]),
                        placement=str(data.get("placement", HASH_BUCKETS)), bucket_count=int(data.get("bucket_count", 16)),
                        field_ids=tuple((str(n), int(i), str(t)) for n, i, t in data.get("field_ids", ())),
                        last_field_id=int(data.get("last_field_id", 0)),
                        records_format=str(data.get("records_format", PARQUET)),
                        records_variant=data.get("records_variant"),
                        records_hints=tuple(dict(data.get("records_hints", {})).items()))

    @property
    def stored_format(self) -> str:
        """The records format of the data files ("" in a requested definition reads as Parquet)."""
        return self.records_format or PARQUET

    @property
    def in_key_ranges(self) -> bool:
        return self.placement == KEY_RANGES
