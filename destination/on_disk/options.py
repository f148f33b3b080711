"""How a root's tables are stored: the layout of their versions and the retention of old versions (the
configuration fields `layout`, `retention_versions`, `retention_min_age_seconds`; docs/reference/on-disk-format.md
"Layouts and retention").

- complete: every `v<N>/` holds all its data files (unchanged ones carried forward: a hard link on disk, a
  server-side copy on S3), so any reader of the directory (`spark.read.parquet(v<N>/)`, pandas) sees the table;
  on S3 the table is stored once per retained version.
- referencing: `v<N>/` holds only the files version N wrote; its `_manifest` and `_files.json` list the unchanged
  files where an earlier version wrote them. Every data file is stored once; only manifest readers see the table.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from destination.model.table_model import AVRO, PARQUET
from destination.records_formats.choice import RecordsChoice, records_choice
from destination.runtime.errors import Problems, UserActionRequired

COMPLETE, REFERENCING = "complete", "referencing"
LAYOUTS = (COMPLETE, REFERENCING)
LAYOUT_FIELD = "layout"
VERSIONS_FIELD = "retention_versions"
MIN_AGE_FIELD = "retention_min_age_seconds"
TABLE_FORMATS_FIELD = "table_formats"
DELTA, ICEBERG = "delta", "iceberg"
TABLE_FORMATS = (DELTA, ICEBERG)  # also written for every version, in this order (destination/table_formats/)
NO_FORMATS = "none"
# the table formats a table's records format allows: Delta Lake reads Parquet data files only; Iceberg reads Parquet
# and Avro data files (the spec's; Iceberg's Java library reads both, while pyiceberg 0.12 and DuckDB's iceberg
# extension read Parquet data files only: docs/reference/records-formats.md); delimited files are in neither
APPLIES = {PARQUET: TABLE_FORMATS, AVRO: (ICEBERG,), "delimited": ()}
KEEP_VERSIONS = 2
MIN_AGE_SECONDS = 3600.0


@dataclass(frozen=True)
class Retention:
    """Versions older than the newest `keep_versions` go once superseded for `min_age_seconds` (readers that
    loaded a version have that long to read its files)."""

    keep_versions: int = KEEP_VERSIONS
    min_age_seconds: float = MIN_AGE_SECONDS


@dataclass(frozen=True)
class StoreOptions:
    layout: str = COMPLETE
    retention: Retention = field(default_factory=Retention)
    table_formats: tuple[str, ...] = TABLE_FORMATS
    records: RecordsChoice = field(default_factory=RecordsChoice)  # the records format of tables created from now on


def default_layout(is_s3: bool) -> str:
    """referencing on S3 (a complete layout stores the table once per retained version there); complete on a
    local disk, where carried files are hard links and cost no bytes."""
    return REFERENCING if is_s3 else COMPLETE


def store_options(configuration: dict[str, str], is_s3: bool) -> StoreOptions:
    """The configuration's layout and retention fields (empty: the defaults); a bad value is a UserActionRequired
    naming the field."""
    problems = Problems()
    layout = problems.attempt(lambda: _layout(configuration, is_s3))
    keep = problems.attempt(lambda: int(_number(configuration, VERSIONS_FIELD, KEEP_VERSIONS, integer=True)))
    age = problems.attempt(lambda: _number(configuration, MIN_AGE_FIELD, MIN_AGE_SECONDS, integer=False))
    if keep is not None and keep < 1:
        problems.add(f"configuration field {VERSIONS_FIELD!r}: {keep} is below 1 (the latest version is always kept)")
    if age is not None and not age >= 0:
        problems.add(f"configuration field {MIN_AGE_FIELD!r}: {age} is not a number of seconds ≥ 0")
    formats = problems.attempt(lambda: table_formats(configuration))
    records = problems.attempt(lambda: records_choice(configuration))
    problems.raise_any()
    assert layout is not None and keep is not None and age is not None and formats is not None and records is not None
    return StoreOptions(layout, Retention(keep, age), formats, records)


def _layout(configuration: dict[str, str], is_s3: bool) -> str:
    layout = (configuration.get(LAYOUT_FIELD) or "").strip().lower() or default_layout(is_s3)
    if layout not in LAYOUTS:
        raise UserActionRequired(f"configuration field {LAYOUT_FIELD!r}: {layout!r} is not one of {', '.join(LAYOUTS)}")
    return layout


def describes(table_format: str, records_format: str) -> bool:
    """Whether the table format (delta, iceberg) describes data files of `records_format`."""
    return table_format in APPLIES.get(records_format or PARQUET, TABLE_FORMATS)


def table_formats(configuration: dict[str, str]) -> tuple[str, ...]:
    """`table_formats`: a comma-separated list of delta and iceberg, or none (empty: both)."""
    text = (configuration.get(TABLE_FORMATS_FIELD) or "").strip().lower()
    if not text:
        return TABLE_FORMATS
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == [NO_FORMATS]:
        return ()
    unknown = [n for n in names if n not in TABLE_FORMATS]
    if unknown or not names:
        raise UserActionRequired(f"configuration field {TABLE_FORMATS_FIELD!r}: {text!r} is not a list of "
                                 f"{' and '.join(TABLE_FORMATS)}, or {NO_FORMATS}")
    return tuple(n for n in TABLE_FORMATS if n in names)


def _number(configuration: dict[str, str], name: str, default: float, *, integer: bool) -> float:
    text = (configuration.get(name) or "").strip()
    if not text:
        return default
    try:
        return int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise UserActionRequired(f"configuration field {name!r}: {text!r} is not {kind}") from None
