"""The records formats' codecs (destination/records_formats/): Avro and every delimited variant, each checked against
an oracle that is not the codec: fastavro's own reading with logical types, Python's `csv` module configured only
from the written hints, records-mover loading the `_format_*` strictly and reading the directory into pandas."""
from __future__ import annotations

import base64
import bz2
import csv
import datetime as dt
import gzip
import io
import json
import math
import re
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from destination.model.table_model import ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema
from destination.records_formats import hints as hints_mod
from destination.records_formats.codec import Codec, codec
from destination.runtime.errors import BadRequest, DamagedDataFile, UserActionRequired
from tests.records_directory import write_directory

UTC = dt.UTC
META = "_destination_meta"

COLUMNS = (
    ColumnDef("id", "LONG", primary_key=True), ColumnDef("flag", "BOOLEAN"), ColumnDef("small", "SHORT"),
    ColumnDef("count", "INT"), ColumnDef("big", "LONG"), ColumnDef("amount", "DECIMAL", precision=38, scale=10),
    ColumnDef("huge", "DECIMAL", precision=76, scale=20), ColumnDef("ratio", "FLOAT"), ColumnDef("score", "DOUBLE"),
    ColumnDef("day", "NAIVE_DATE"), ColumnDef("local_at", "NAIVE_DATETIME"), ColumnDef("created_at", "UTC_DATETIME"),
    ColumnDef("at_time", "NAIVE_TIME"), ColumnDef("payload", "BINARY"), ColumnDef("name", "STRING"),
    ColumnDef("attrs", "JSON"), ColumnDef("doc", "XML"), ColumnDef("_fivetran_synced", "UTC_DATETIME"),
    ColumnDef("_fivetran_deleted", "BOOLEAN"),
)
TABLE_DEF = TableDef("every_type", COLUMNS)
STRING_EDGES = ["", "NULL", "\\N", 'say "hi"', "a,b", "line\nbreak", "cr\rlf\r\n", "ünïcødé 😀 中文", "nul\x00byte",
                "ctl\x01\x02", "back\\slash", "  spaced  ", "tab\there", "'single'", "\\"]
SYNC = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def _row(i: int, **values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {c.name: None for c in COLUMNS}
    base.update(id=i, _fivetran_synced=SYNC, _fivetran_deleted=False, **{META: '{"version": 3, "changes": []}'})
    base.update(values)
    return base


def edge_rows() -> list[dict[str, Any]]:
    rows = [
        _row(1, flag=True, small=-(2**15), count=-(2**31), big=-(2**63), amount=Decimal("-" + "9" * 28 + "." + "9" * 10),
             huge=Decimal("-" + "9" * 56 + "." + "9" * 20), ratio=3.4028234663852886e38, score=5e-324,
             day=dt.date(1, 1, 1), local_at=dt.datetime(1, 1, 1), created_at=dt.datetime(1, 1, 1, tzinfo=UTC),
             at_time=dt.time(0, 0), payload=bytes(range(256)), name="plain", attrs='{"a": [1, "x,y"]}',
             doc='<a b="c">d, e</a>'),
        _row(2, flag=False, small=2**15 - 1, count=2**31 - 1, big=2**63 - 1, amount=Decimal("0.0000000001"),
             huge=Decimal("0.00000000000000000001"), ratio=1.401298464324817e-45, score=-0.0,
             day=dt.date(9999, 12, 31), local_at=dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
             created_at=dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
             at_time=dt.time(23, 59, 59, 999999), payload=b"\x00", name="x", _fivetran_deleted=True),
        _row(3, ratio=float("nan"), score=float("inf"), amount=Decimal(0), payload=b"", **{META: None}),
        _row(4, ratio=float("-inf"), score=0.1),
        _row(5, score=1 / 3, ratio=0.1, day=dt.date(2024, 2, 29), local_at=dt.datetime(1970, 1, 1, 0, 0, 0, 1),
             created_at=dt.datetime(2000, 1, 2, 3, 4, 5, 6, tzinfo=UTC), at_time=dt.time(12, 0, 0, 1)),
    ]
    for i, s in enumerate(STRING_EDGES):
        rows.append(_row(100 + i, name=s, attrs=s, doc=s))
    rows.append(_row(200))  # every value NULL but the key and system columns
    return rows


def edge_table() -> pa.Table:
    return pa.Table.from_pylist(edge_rows(), schema=arrow_schema(list(COLUMNS)))


def same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to NaN and -0.0 distinct from 0.0 (exactness of floats)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return bool(a == b) and type(a) is type(b)


def assert_rows_equal(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)
        for name in w:
            assert same(g[name], w[name]), (w["id"], name, g[name], w[name])


# ---- the hints ---------------------------------------------------------------------------------------------

CSV_ISO = {"dateformat": "YYYY-MM-DD", "datetimeformat": "YYYY-MM-DD HH24:MI:SS",
           "datetimeformattz": "YYYY-MM-DD HH:MI:SSOF"}
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("bluelabs", {}), ("bigquery", {}), ("vertica", {}), ("csv", CSV_ISO),
    ("bluelabs", {"compression": "BZIP", "header-row": True, "encoding": "UTF16LE", "dateformat": "DD-MM-YYYY"}),
    ("bigquery", {"compression": None, "encoding": "UTF8BOM", "header-row": False}),
    ("csv", {**CSV_ISO, "dateformat": "MM-DD-YYYY", "compression": "GZIP", "timeonlyformat": "HH:MI:SS"}),
]
VARIANT_IDS = [f"{v}-{i}" for i, (v, _) in enumerate(VARIANTS)]


@pytest.mark.parametrize("variant", ["bluelabs", "csv", "bigquery", "vertica", "dumb"])
def test_each_variants_defaults_are_records_movers(variant: str) -> None:
    from records_mover.records.records_format import DelimitedRecordsFormat

    theirs = DelimitedRecordsFormat(variant=variant).hints
    ours = {**hints_mod._BASE, **hints_mod._VARIANTS[variant]}
    assert ours == theirs and len(ours) == 13


@pytest.mark.parametrize(("variant", "overrides", "words"), [
    ("csv", {}, ["'csv'", "dateformat", "MM/DD/YY", "century", "override"]),
    ("csv", {"dateformat": "YYYY-MM-DD"}, ["datetimeformat", "MM/DD/YY HH24:MI"]),
    ("dumb", {}, ["'dumb'", "comma", "_destination_meta"]),
    ("bluelabs", {"encoding": "LATIN1"}, ["encoding", "LATIN1", "every character"]),
    ("bluelabs", {"compression": "LZO"}, ["compression", "LZO"]),
    ("bluelabs", {"timeonlyformat": "HH12:MI AM"}, ["timeonlyformat", "no seconds"]),
    ("bluelabs", {"field-delimiter": "|"}, ["field-delimiter", "defines the variant"]),
    ("bluelabs", {"nullstring": "x"}, ["unknown hint", "nullstring"]),
    ("tsv", {}, ["'tsv'", "unknown"]),
])
def test_lossy_or_unknown_hints_are_refused_at_configuration(variant: str, overrides: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(BadRequest) as err:
        codec("delimited", variant, overrides)
    for word in words:
        assert word in str(err.value)


def test_the_choice_of_format_is_checked() -> None:
    with pytest.raises(BadRequest, match="records_format 'orc'"):
        codec("orc")
    with pytest.raises(BadRequest, match="delimited only"):
        codec("avro", "csv")
    with pytest.raises(BadRequest, match="needs records_variant"):
        codec("delimited")
    assert codec("avro").format_content() == b"" and codec("avro").suffix == ".avro"
    assert codec("delimited", "vertica").suffix == ".csv" and codec("delimited", "bluelabs").suffix == ".csv.gz"
    assert codec("delimited", "bluelabs", {"compression": "BZIP"}).suffix == ".csv.bz2"


def test_avro_refuses_a_column_name_avro_cannot_hold() -> None:
    table = TableDef("t", (ColumnDef("id", "LONG", True), ColumnDef("first name", "STRING")))
    with pytest.raises(BadRequest, match=r"table 't', column 'first name': not an Avro field name"):
        codec("avro").check(table)


@pytest.mark.parametrize(("fmt", "variant"), [("avro", None), ("delimited", "bluelabs"), ("delimited", "vertica"), ("delimited", "csv")])
def test_a_file_that_is_not_the_tables_is_a_clear_error(fmt: str, variant: str | None) -> None:
    c = codec(fmt, variant, CSV_ISO if variant == "csv" else None)
    other = TableDef("other", (ColumnDef("id", "LONG", True), ColumnDef("v", "STRING")))
    buf = io.BytesIO()
    c.write(pa.Table.from_pylist([{"id": 1, "v": "x", META: None}], schema=arrow_schema(list(other.columns))), other, buf)
    with pytest.raises(BadRequest, match=r"table 'every_type': an? (Avro|delimited) data file"):
        c.read(io.BytesIO(buf.getvalue()), TABLE_DEF)
    if fmt == "avro":
        with pytest.raises(BadRequest, match=r"table 'every_type': an Avro data file does not read"):
            c.read(io.BytesIO(b"Obj\x01 truncated"), TABLE_DEF)


# ---- Avro -----------------------------------------------------------------------------------------------------

AVRO_TYPES = {  # the seeds' Avro types (Airbyte S3 1.0), written out by hand
    "id": "long", "flag": "boolean", "small": "int", "count": "int", "big": "long",
    "amount": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10},
    "huge": {"type": "bytes", "logicalType": "decimal", "precision": 76, "scale": 20},
    "ratio": "float", "score": "double", "day": {"type": "int", "logicalType": "date"},
    # timestamps: Airbyte's timestamp-micros, with Iceberg's `adjust-to-utc` telling the two kinds apart
    "local_at": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False},
    "created_at": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True},
    "at_time": {"type": "long", "logicalType": "time-micros"}, "payload": "bytes", "name": "string",
    "attrs": "string", "doc": "string", "_fivetran_synced": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True},
    "_fivetran_deleted": "boolean", META: "string",
}


def test_avro_round_trips_every_value_and_fastavro_reads_them_exactly() -> None:
    table = edge_table()
    buf = io.BytesIO()
    stored = codec("avro").write(table, TABLE_DEF, buf)
    assert_rows_equal(stored.to_pylist(), table.to_pylist())
    raw = buf.getvalue()
    reader = fastavro.reader(io.BytesIO(raw))
    assert reader.codec in ("deflate", "snappy")
    schema_fields = {f["name"]: f["type"] for f in reader.writer_schema["fields"]}  # type: ignore[index]
    assert list(schema_fields) == [c.name for c in COLUMNS] + [META]
    for name, avro_type in AVRO_TYPES.items():
        branches = schema_fields[name]
        assert branches[0] == "null" and len(branches) == 2
        got = branches[1]
        if isinstance(got, dict):
            got = {k: v for k, v in got.items() if k in ("type", "logicalType", "precision", "scale", "adjust-to-utc")}
        assert got == avro_type, name
    # fastavro's values (logical types applied) against the input's Python values
    assert_rows_equal(list(reader), fastavro_rows(table))  # type: ignore[arg-type]
    assert_rows_equal(codec("avro").read(io.BytesIO(raw), TABLE_DEF).to_pylist(), table.to_pylist())


@pytest.mark.parametrize("rows", [0, 1, 3000])
def test_avro_files_of_no_row_one_row_and_many_blocks(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    from destination.records_formats import avro_encode

    monkeypatch.setattr(avro_encode, "_BLOCK_BYTES", 5000)  # blocks of a few rows
    every = edge_table()
    table = every.take(pa.array([i % every.num_rows for i in range(rows)], pa.int64()))
    buf = io.BytesIO()
    codec("avro").write(table, TABLE_DEF, buf)
    blocks = list(fastavro.block_reader(io.BytesIO(buf.getvalue())))
    assert sum(b.num_records for b in blocks) == rows and (len(blocks) > 10) == (rows == 3000)
    assert_rows_equal(list(fastavro.reader(io.BytesIO(buf.getvalue()))), fastavro_rows(table))  # type: ignore[arg-type]


def edge_rows_as_arrow_pylist(table: pa.Table) -> list[dict[str, Any]]:
    """The input rows, UTC datetimes with the `timezone.utc` fastavro returns (the same instants)."""
    return [{k: (v.astimezone(UTC) if isinstance(v, dt.datetime) and v.tzinfo else v) for k, v in r.items()}
            for r in table.to_pylist()]


def fastavro_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The input rows as fastavro reads them: every datetime in `timezone.utc` (fastavro ignores `adjust-to-utc`:
    a timestamp without zone reads as that time in UTC)."""
    return [as_fastavro_reads(r) for r in table.to_pylist()]


def as_fastavro_reads(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.astimezone(UTC) if v.tzinfo else v.replace(tzinfo=UTC)) if isinstance(v, dt.datetime) else v
            for k, v in row.items()}


# ---- delimited: the oracle (hints → csv.Dialect, values parsed per the hints' formats) --------------------------

def python_format(hint: str) -> str:
    """A records-spec date/time hint as a strptime format; `SS` carries the six-digit fraction."""
    out = hint.replace("YYYY", "%Y").replace("MM", "%m").replace("DD", "%d").replace("HH24", "%H").replace("HH", "%H")
    return out.replace("MI", "%M").replace("SS", "%S.%f").replace("OF", "%z")


def oracle_rows(raw: bytes, hints: dict[str, Any], table_def: TableDef) -> list[dict[str, Any]]:
    data = {"GZIP": gzip.decompress, "BZIP": bz2.decompress, None: lambda b: b}[hints["compression"]](raw)
    encoding = {"UTF8": "utf-8", "UTF8BOM": "utf-8-sig", "UTF16": "utf-16", "UTF16LE": "utf-16-le",
                "UTF16BE": "utf-16-be", "UTF16BOM": "utf-16"}[hints["encoding"]]
    text = data.decode(encoding)

    class Dialect(csv.Dialect):
        delimiter = hints["field-delimiter"]
        quotechar = hints["quotechar"]
        escapechar = hints["escape"]
        doublequote = hints["doublequote"]
        skipinitialspace = False
        lineterminator = hints["record-terminator"]
        quoting = {None: csv.QUOTE_NONE, "minimal": csv.QUOTE_MINIMAL, "all": csv.QUOTE_ALL,
                   "nonnumeric": csv.QUOTE_NONNUMERIC}[hints["quoting"]]

    terminator = hints["record-terminator"]
    if terminator in ("\n", "\r\n", "\r"):
        records = list(csv.reader(io.StringIO(text, newline=""), Dialect))
    else:  # the csv reader only knows CR/LF: split the records on the terminator, then read each one
        assert text.endswith(terminator)
        records = [next(csv.reader([r], Dialect)) for r in text[:-len(terminator)].split(terminator)]
    names = [c.name for c in table_def.columns] + [META]
    if hints["header-row"]:
        assert records.pop(0) == names
    types = {c.name: c.type for c in table_def.columns}
    return [{n: parse(v, types.get(n, "STRING"), hints) for n, v in zip(names, rec, strict=True)} for rec in records]


def parse(text: str, fivetran_type: str, hints: dict[str, Any]) -> Any:
    if text == "":
        return None
    if fivetran_type == "BOOLEAN":
        return {"true": True, "false": False}[text]
    if fivetran_type in ("SHORT", "INT", "LONG"):
        return int(text)
    if fivetran_type in ("FLOAT", "DOUBLE"):  # documented spellings: NaN, Infinity, -Infinity, or a plain number
        assert text in ("NaN", "Infinity", "-Infinity") or re.fullmatch(r"-?\d+(\.\d+)?(e[+-]\d+)?", text), text
    if fivetran_type == "FLOAT":  # the shortest text of the float32: read back at float32
        return struct.unpack("<f", struct.pack("<f", float(text)))[0]
    if fivetran_type == "DOUBLE":
        return float(text)
    if fivetran_type == "DECIMAL":
        assert "E" not in text.upper(), text  # plain notation
        return Decimal(text)
    if fivetran_type == "NAIVE_DATE":
        return dt.datetime.strptime(text, python_format(hints["dateformat"])).date()
    if fivetran_type == "NAIVE_TIME":
        return dt.datetime.strptime(text, python_format(hints["timeonlyformat"])).time()
    if fivetran_type == "NAIVE_DATETIME":
        return dt.datetime.strptime(text, python_format(hints["datetimeformat"]))
    if fivetran_type == "UTC_DATETIME":
        value = dt.datetime.strptime(text, python_format(hints["datetimeformattz"]))
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if fivetran_type == "BINARY":
        return base64.b64decode(text, validate=True)
    return text


def expected_stored(rows: list[dict[str, Any]], hints: dict[str, Any], table_def: TableDef) -> list[dict[str, Any]]:
    """The rows as the docs say a variant stores them: values it cannot hold NULL, recorded in the row's meta."""
    unquoted = hints["quoting"] is None and hints["escape"] is None
    forbidden = ["\x00"] + ([hints["field-delimiter"], hints["record-terminator"], "\r", "\n"] if unquoted else [])
    out = []
    for row in rows:
        row = dict(row)
        nulled = []
        for c in table_def.columns:
            v = row[c.name]
            if (isinstance(v, (str, bytes)) and len(v) == 0) or (isinstance(v, str) and any(f in v for f in forbidden)):
                row[c.name] = None
                nulled.append({"field": c.name, "change": "NULLED", "reason": "DESTINATION_SERIALIZATION_ERROR"})
        if nulled:
            meta = json.loads(row[META]) if row[META] else {"version": 0, "changes": []}
            row[META] = {"version": meta["version"], "changes": meta["changes"] + nulled}
        elif row[META]:
            row[META] = json.loads(row[META])
        out.append(row)
    return out


def decoded_meta(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, META: json.loads(r[META]) if r[META] else None} for r in rows]


@pytest.mark.parametrize(("variant", "overrides"), VARIANTS, ids=VARIANT_IDS)
def test_delimited_round_trips_and_the_csv_module_reads_every_value_from_the_hints_alone(variant: str, overrides: dict[str, Any]) -> None:
    table = edge_table()
    c = codec("delimited", variant, overrides)
    hints = json.loads(c.format_content())["hints"]
    assert json.loads(c.format_content()) == {"type": "delimited", "variant": variant, "hints": hints}
    assert len(hints) == 13
    buf = io.BytesIO()
    stored = c.write(table, TABLE_DEF, buf)
    want = expected_stored(edge_rows_as_arrow_pylist(table), hints, TABLE_DEF)
    assert_rows_equal(decoded_meta(edge_rows_as_arrow_pylist(stored)), want)
    assert_rows_equal(decoded_meta(oracle_rows(buf.getvalue(), hints, TABLE_DEF)), want)
    back = c.read(io.BytesIO(buf.getvalue()), TABLE_DEF)
    assert back.schema == stored.schema
    assert_rows_equal(back.to_pylist(), stored.to_pylist())


def test_a_variant_records_what_it_cannot_hold_in_the_rows_meta() -> None:
    """vertica neither quotes nor escapes: its delimiter, terminator, CR and LF cannot be held; csv holds them."""
    rows = [_row(1, name="a\x01b"), _row(2, name="a\nb"), _row(3, name="fine, \"quoted\"")]
    table = pa.Table.from_pylist(rows, schema=arrow_schema(list(COLUMNS)))
    stored = codec("delimited", "vertica").write(table, TABLE_DEF, io.BytesIO())
    assert stored.column("name").to_pylist() == [None, None, 'fine, "quoted"']
    metas = [json.loads(m) for m in stored.column(META).to_pylist()]
    assert [m["changes"] for m in metas] == [[{"field": "name", "change": "NULLED", "reason": "DESTINATION_SERIALIZATION_ERROR"}]] * 2 + [[]]
    assert [m["version"] for m in metas] == [3, 3, 3]
    kept = codec("delimited", "csv", CSV_ISO).write(table, TABLE_DEF, io.BytesIO())
    assert kept.column("name").to_pylist() == ["a\x01b", "a\nb", 'fine, "quoted"']


def test_a_header_row_the_variant_cannot_write_is_refused() -> None:
    table = TableDef("t", (ColumnDef("id", "LONG", True), ColumnDef("a\nb", "STRING")))
    c = codec("delimited", "bluelabs", {"header-row": True})
    c.check(table)  # bluelabs escapes the newline
    with pytest.raises(BadRequest, match=r"column 'a\\nb'"):
        Codec("delimited", "vertica", {**c.hints, **hints_mod._VARIANTS["vertica"], "header-row": True}).check(table)


# ---- records-mover: the format file strictly, and the directory into pandas ---------------------------------

def _resolver():  # type: ignore[no-untyped-def]
    from records_mover.url.resolver import UrlResolver

    return UrlResolver(boto3_session_getter=lambda: None, gcs_client_getter=lambda: None,
                       gcp_credentials_getter=lambda: None)


def pandas_rows() -> list[dict[str, Any]]:
    """Rows pandas can hold: timestamps within its nanosecond range, no text pandas reads as NA by default, integers
    within 2^53 (records-mover's reader lets pandas turn an integer column with NULLs into float64)."""
    return [
        _row(1, flag=True, small=-(2**15), count=-(2**31), big=-(2**53), amount=Decimal("-12345.6789012345"),
             huge=Decimal("1.5"), ratio=0.5, score=1 / 3, day=dt.date(1970, 1, 1),
             local_at=dt.datetime(2001, 2, 3, 4, 5, 6, 7), created_at=dt.datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
             at_time=dt.time(23, 59, 59, 999999), payload=b"\x00\xff", name='a, "quoted"\nvalue',
             attrs='{"k": [1, 2]}', doc="<x>ü</x>"),
        _row(2, flag=False, small=7, count=8, big=2**53, amount=Decimal("0.0000000001"), huge=Decimal(0),
             ratio=-2.25, score=-0.0, day=dt.date(2262, 4, 11), local_at=dt.datetime(1677, 9, 22),
             created_at=dt.datetime(2262, 4, 11, tzinfo=UTC), at_time=dt.time(0, 0), payload=b"x",
             name="back\\slash", attrs="[]", doc="<y/>", _fivetran_deleted=True),
        _row(3),
    ]


@pytest.mark.parametrize("fmt", ["avro", "delimited"])
def test_records_mover_loads_the_format_file_strictly(tmp_path: Path, fmt: str) -> None:
    from records_mover.records.records_directory import RecordsDirectory

    c = codec(fmt, "bluelabs" if fmt == "delimited" else None)
    table = pa.Table.from_pylist(pandas_rows(), schema=arrow_schema(list(COLUMNS)))
    write_directory(tmp_path / "d", c, table, TABLE_DEF)
    records = RecordsDirectory(records_loc=_resolver().directory_url((tmp_path / "d").as_uri() + "/"))
    loaded = records.load_format(fail_if_dont_understand=True)
    if fmt == "avro":
        assert type(loaded).__name__ == "AvroRecordsFormat" and (tmp_path / "d" / "_format_avro").read_bytes() == b""
    else:
        assert loaded.hints == c.hints and loaded.variant == "bluelabs"  # type: ignore[attr-defined]
        loaded.validate(fail_if_cant_handle_hint=True)  # type: ignore[attr-defined]
    (entry,) = records.get_manifest()["entries"]
    assert entry["meta"]["content_length"] == Path(entry["url"].removeprefix("file://")).stat().st_size
    assert [f.name for f in records.load_schema_json_obj().fields] == [c.name for c in COLUMNS] + [META]


def _from_pandas(value: Any, fivetran_type: str) -> Any:
    """A records-mover DataFrame cell as the Python value of the column's type (its documented text forms)."""
    import pandas as pd

    if value is None or (isinstance(value, float) and math.isnan(value) and fivetran_type not in ("FLOAT", "DOUBLE")):
        return None
    if value is pd.NaT:
        return None
    if fivetran_type == "BOOLEAN":
        return bool(value)
    if fivetran_type in ("SHORT", "INT", "LONG"):
        return int(value)
    if fivetran_type in ("FLOAT", "DOUBLE"):
        return float(value)
    if fivetran_type == "DECIMAL":
        return Decimal(str(value))
    if fivetran_type == "NAIVE_DATE":
        return pd.Timestamp(value).date()
    if fivetran_type == "NAIVE_TIME":
        return pd.Timestamp(value).time()
    if fivetran_type == "NAIVE_DATETIME":
        return pd.Timestamp(value).to_pydatetime()
    if fivetran_type == "UTC_DATETIME":
        return pd.Timestamp(value).tz_convert(UTC).to_pydatetime() if pd.Timestamp(value).tzinfo else \
            pd.Timestamp(value).to_pydatetime().replace(tzinfo=UTC)
    if fivetran_type == "BINARY":
        return base64.b64decode(value)
    return str(value)


@pytest.mark.parametrize(("variant", "overrides"), [("bluelabs", {}), ("csv", CSV_ISO), ("bigquery", {}), ("vertica", {}),
                                                    ("bluelabs", {"compression": "BZIP", "header-row": True})],
                         ids=["bluelabs", "csv", "bigquery", "vertica", "bluelabs-bzip-header"])
def test_records_mover_reads_each_delimited_variant_into_the_parquet_tables_rows(tmp_path: Path, variant: str, overrides: dict[str, Any]) -> None:
    from records_mover.records.processing_instructions import ProcessingInstructions
    from records_mover.records.records_directory import RecordsDirectory
    from records_mover.records.sources.directory import RecordsDirectoryRecordsSource

    table = pa.Table.from_pylist(pandas_rows(), schema=arrow_schema(list(COLUMNS)))
    c = codec("delimited", variant, overrides)
    stored = write_directory(tmp_path / "d", c, table, TABLE_DEF)
    # the rows as stored: unchanged but for what vertica cannot hold (row 1's name has a newline), recorded
    assert_rows_equal(decoded_meta(stored.to_pylist()), expected_stored(table.to_pylist(), c.hints, TABLE_DEF))
    assert (stored.column("name")[0].as_py() is None) == (variant == "vertica")
    pq.write_table(stored, tmp_path / "reference.parquet")
    reference = pq.read_table(tmp_path / "reference.parquet").to_pylist()  # the Parquet table's rows
    resolver = _resolver()
    source = RecordsDirectoryRecordsSource(RecordsDirectory(resolver.directory_url((tmp_path / "d").as_uri() + "/")),
                                           fail_if_dont_understand=True, url_resolver=resolver)
    instructions = ProcessingInstructions(fail_if_dont_understand=True, fail_if_cant_handle_hint=True,
                                          fail_if_row_invalid=True)
    with source.to_fileobjs_source(instructions) as fileobjs, fileobjs.to_dataframes_source(instructions) as frames:
        import pandas as pd

        df = pd.concat(list(frames.dfs))
    types = {c.name: c.type for c in COLUMNS}
    names = [c.name for c in COLUMNS] + [META]
    if not (overrides.get("header-row") or hints_mod._VARIANTS[variant].get("header-row")):
        df.columns = names
    assert list(df.columns) == names
    got = [{n: _from_pandas(None if pd.isna(v) and not isinstance(v, float) else v, types.get(n, "STRING"))
            for n, v in zip(names, rec, strict=True)} for rec in df.itertuples(index=False)]
    want = [{k: (v.astimezone(UTC) if isinstance(v, dt.datetime) and v.tzinfo else v) for k, v in r.items()}
            for r in reference]
    for g, w in zip(got, want, strict=True):  # pandas reads an all-NULL float column as NaN: NULL there
        for n in ("ratio", "score"):
            if w[n] is None and isinstance(g[n], float) and math.isnan(g[n]):
                g[n] = None
    assert_rows_equal(got, want)


def _fastavro_table(raw: bytes, table_def: TableDef) -> pa.Table:
    """The oracle: fastavro's own reading of the file (its logical types), put into the table's Arrow types."""
    target = arrow_schema(list(table_def.columns))
    rows = list(fastavro.reader(io.BytesIO(raw)))
    return pa.Table.from_arrays([pa.array([r[f.name] for r in rows], f.type) for f in target], schema=target)


@pytest.mark.parametrize("rows", [0, 1, 3000])
def test_the_fast_avro_reader_reads_every_value_as_fastavro_does(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    from destination.records_formats import avro, avro_decode, avro_encode

    monkeypatch.setattr(avro_encode, "_BLOCK_BYTES", 5000)  # many blocks
    every = edge_table()
    table = every.take(pa.array([i % every.num_rows for i in range(rows)], pa.int64()))
    buf = io.BytesIO()
    codec("avro").write(table, TABLE_DEF, buf)
    raw = buf.getvalue()
    fast = avro_decode.read(raw, avro.avro_schema(TABLE_DEF), arrow_schema(list(COLUMNS)))
    assert fast is not None  # the codec's own files take the fast path, every type included
    oracle = _fastavro_table(raw, TABLE_DEF)
    assert fast.schema == oracle.schema
    assert_rows_equal(fast.to_pylist(), oracle.to_pylist())
    assert_rows_equal(codec("avro").read(io.BytesIO(raw), TABLE_DEF).to_pylist(), oracle.to_pylist())


def test_avro_files_written_before_field_ids_and_iceberg_timestamps_read_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written before the fields carried `field-id` and timestamps Iceberg's `adjust-to-utc` (a timestamp
    without zone was `local-timestamp-micros`) hold the same bytes: they take the fast path and read as before."""
    from destination.records_formats import avro, avro_decode

    current = avro.avro_schema(TABLE_DEF)
    earlier = {**current, "fields": [
        {"name": f["name"], "type": ["null", _earlier_type(f["type"][1])], "default": None} for f in current["fields"]]}
    assert "local-timestamp-micros" in json.dumps(earlier) and "field-id" not in json.dumps(earlier)
    table = edge_table()
    buf = io.BytesIO()
    with monkeypatch.context() as patch:
        patch.setattr(avro, "avro_schema", lambda _table_def: earlier)
        codec("avro").write(table, TABLE_DEF, buf)
    raw = buf.getvalue()
    assert json.loads(fastavro.reader(io.BytesIO(raw)).metadata["avro.schema"])["fields"] == earlier["fields"]
    fast = avro_decode.read(raw, current, arrow_schema(list(COLUMNS)))
    assert fast is not None
    assert_rows_equal(fast.to_pylist(), table.to_pylist())
    assert_rows_equal(codec("avro").read(io.BytesIO(raw), TABLE_DEF).to_pylist(), table.to_pylist())


def _earlier_type(avro_type: Any) -> Any:
    if isinstance(avro_type, dict) and avro_type.get("logicalType") == "timestamp-micros":
        return {"type": "long", "logicalType": "timestamp-micros" if avro_type["adjust-to-utc"] else
                "local-timestamp-micros"}
    return avro_type


def test_an_avro_file_the_fast_reader_cannot_type_exactly_is_read_by_fastavro() -> None:
    """fastavro's writer encodes decimals in their fewest bytes (the codec: full width) and may use another block
    codec: the fast reader declines and the file reads through fastavro, the same values."""
    from destination.records_formats import avro, avro_decode

    table = edge_table()
    schema = avro.avro_schema(TABLE_DEF)
    for block_codec in ("deflate", "null"):
        buf = io.BytesIO()
        fastavro.writer(buf, schema, edge_rows_as_arrow_pylist(table), codec=block_codec)
        raw = buf.getvalue()
        assert avro_decode.read(raw, schema, arrow_schema(list(COLUMNS))) is None
        assert_rows_equal(codec("avro").read(io.BytesIO(raw), TABLE_DEF).to_pylist(), table.to_pylist())


@pytest.mark.unit
def test_values_a_variant_cannot_hold_are_counted_in_large_string_and_binary_columns_too() -> None:
    """Empty text and binary become NULL in a delimited file: `unheld_values` counts them whatever the Arrow width
    of the column (a large_string column would otherwise slip past the check, its empty values NULL uncounted)."""
    from destination.records_formats.delimited import unheld_values

    table_def = TableDef("t", (ColumnDef("id", "INT", primary_key=True), ColumnDef("name", "STRING"),
                               ColumnDef("payload", "BINARY")))
    names = ["a", "", None, "", "b"]
    payloads = [b"x", b"", b"", None, b"y"]
    rows = pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int32()), "name": pa.array(names, pa.large_string()),
                     "payload": pa.array(payloads, pa.large_binary())})
    expected = {"name": sum(1 for v in names if v == ""), "payload": sum(1 for v in payloads if v == b"")}
    assert unheld_values(rows, table_def, hints_mod.resolve("bluelabs")) == expected


GOLDEN_DEF = TableDef("golden", (ColumnDef("id", "LONG", primary_key=True), ColumnDef("amount", "DECIMAL", precision=10,
                                                                                      scale=2),
                                 ColumnDef("s", "STRING"), ColumnDef("b", "BINARY")))
GOLDEN_ROWS = {"id": [1, 2, 3], "amount": [Decimal("1.50"), None, Decimal("-0.05")],
               "s": ["a,b\\c", 'line\nbreak"q"', "cr\rend"], "b": [b"\x00\x01", None, b"hi"], META: [None, None, None]}
# the files' text, written out by hand from the variants' hints (records-mover's): bluelabs escapes the escape
# character, the delimiter, CR and LF with a backslash; csv and bigquery quote a value holding the delimiter, the
# quote, CR or LF and double its quotes, and write a header row; NULL is the empty field; every scale digit stays
GOLDEN_TEXT = {
    "bluelabs": b"1,1.50,a\\,b\\\\c,AAE=,\n2,,line\\\nbreak\"q\",,\n3,-0.05,cr\\\rend,aGk=,\n",
    "csv": b"id,amount,s,b,_destination_meta\n1,1.50,\"a,b\\c\",AAE=,\n2,,\"line\nbreak\"\"q\"\"\",,\n"
           b"3,-0.05,\"cr\rend\",aGk=,\n",
}
GOLDEN_TEXT["bigquery"] = GOLDEN_TEXT["csv"]


@pytest.mark.parametrize("variant", sorted(GOLDEN_TEXT))
def test_each_variant_writes_exactly_the_text_its_hints_say(variant: str) -> None:
    """The bytes, not only the values read back: a lost trailing zero of a decimal, a quote too many or an escape
    too few would still read as the same values in some readers (the other tests' oracles)."""
    chosen = codec("delimited", variant, CSV_ISO if variant == "csv" else None)  # csv's dates lose the century
    table = pa.table({name: values for name, values in GOLDEN_ROWS.items()},
                     schema=arrow_schema(list(GOLDEN_DEF.columns)))
    out = io.BytesIO()
    chosen.write(table, GOLDEN_DEF, out)
    assert gzip.decompress(out.getvalue()) == GOLDEN_TEXT[variant]


@pytest.mark.unit
@pytest.mark.parametrize("variant, key", [("bluelabs", ""), ("vertica", "a\nb")])
def test_a_key_value_a_variant_cannot_hold_is_refused_not_nulled(variant: str, key: str) -> None:
    """A NULLed key would no longer match its row (a later update or delete of it would miss it): the write is
    refused, naming the table and the key column, and writes nothing; the same value outside the key is NULLed and
    recorded as before."""
    table_def = TableDef("t", (ColumnDef("id", "STRING", primary_key=True), ColumnDef("name", "STRING")))
    rows = pa.table({"id": ["k1", key], "name": [key, "n"], "_destination_meta": [None, None]},
                    schema=arrow_schema(list(table_def.columns)))
    out = io.BytesIO()
    with pytest.raises(BadRequest, match=r"table 't', key column 'id': 1 key value\(s\)"):
        codec("delimited", variant).write(rows, table_def, out)
    assert out.getvalue() == b""
    ok = rows.set_column(0, "id", pa.array(["k1", "k2"]))
    stored = codec("delimited", variant).write(ok, table_def, io.BytesIO())
    assert stored.column("name").to_pylist() == [None, "n"] and stored.column("id").to_pylist() == ["k1", "k2"]


@pytest.mark.unit
@pytest.mark.parametrize(("variant", "overrides"), [("bluelabs", {}), ("bigquery", {"header-row": False}),
                                                    ("vertica", {}), ("bluelabs", {"encoding": "UTF16"}),
                                                    ("csv", {**CSV_ISO, "encoding": "UTF8BOM", "header-row": False})])
def test_a_first_value_that_begins_with_a_byte_order_mark_keeps_it(variant: str, overrides: dict[str, Any]) -> None:
    """Without a header row the first record's first value starts the file's text; Arrow's CSV parser drops a BOM
    there. The value reads back whole, as Python's csv module reads it from the hints alone."""
    table_def = TableDef("t", (ColumnDef("code", "STRING", primary_key=True), ColumnDef("note", "STRING")))
    rows = pa.table({"code": ["\ufeffA-1", "B-2"], "note": ["\ufeffx", "y"], META: [None, None]},
                    schema=arrow_schema(list(table_def.columns)))
    chosen = codec("delimited", variant, overrides)
    out = io.BytesIO()
    chosen.write(rows, table_def, out)
    hints = json.loads(chosen.format_content())["hints"]
    assert [r["code"] for r in oracle_rows(out.getvalue(), hints, table_def)] == ["\ufeffA-1", "B-2"]  # the oracle
    assert chosen.read(io.BytesIO(out.getvalue()), table_def).to_pylist() == rows.to_pylist()


DAMAGED = TableDef("orders", (ColumnDef("id", "LONG", primary_key=True), ColumnDef("flag", "BOOLEAN"),
                              ColumnDef("at", "NAIVE_TIME"), ColumnDef("n", "INT")))


@pytest.mark.parametrize(("record", "column"), [
    ("1,True,12:00:00.500000,7,", "flag"), ("1,yes,12:00:00.500000,7,", "flag"),
    ("1,true,12:00:00,7,", "at"), ("1,true,12:00:00.5,7,", "at"), ("1,true,25:61:00.000000,7,", "at"),
    ("1,true,12:00:00.000000,x9x,", "n"), ("1,true,12:00:00.000000,2147483648,", "n"),
    ("1,true,12:00:00.000000,7,,toomany", None),
])
def test_a_damaged_delimited_file_is_refused_naming_the_file_table_and_column_not_the_value(
        tmp_path: Path, record: str, column: str | None) -> None:
    """A value this codec would not have written (another writer's boolean spelling, a time without its six-digit
    fraction or beyond the day, a number out of range) is refused, never read as another value; the error names where,
    and leaves the value out (row data)."""
    from destination.on_disk.datafiles import read_data_file
    from destination.on_disk.records import TABLE_JSON
    from destination.records_formats.choice import records_choice
    from destination.storage.base import StorageSpec
    from destination.storage.local import LocalStorage

    chosen = codec("delimited", "bluelabs", {"compression": None})
    good = io.BytesIO()
    chosen.write(pa.table({"id": [1], "flag": [True], "at": [dt.time(12, 0, 0, 500000)], "n": [7], META: [None]},
                          schema=arrow_schema(list(DAMAGED.columns))), DAMAGED, good)
    assert good.getvalue() == b"1,true,12:00:00.500000,7,\n"  # what the codec writes: the damage below is real
    storage = LocalStorage(StorageSpec(str(tmp_path)))
    table_def = records_choice({"records_format": "delimited", "records_variant": "bluelabs",
                                "records_compression": "none"}).stamp(DAMAGED)
    storage.write_bytes(f"v1/{TABLE_JSON}", json.dumps({"table": table_def.to_json()}).encode())
    storage.write_bytes("v1/b0000-x.csv", (record + "\n").encode())
    with pytest.raises(DamagedDataFile) as refused:  # a Task (no request can mend it), not a bad request
        read_data_file(storage, "v1", "b0000-x.csv")
    message = str(refused.value)
    assert "b0000-x.csv" in message and "table 'orders'" in message
    assert column is None or f"column {column!r}" in message
    for value in ("True", "yes", "x9x", "2147483648", "25:61", "toomany", "12:00:00.5"):
        assert value not in message, message


@pytest.mark.parametrize("records_format, variant, compression, damage", [
    ("avro", None, "none", "a value beyond its type"), ("avro", None, "none", "a sync marker byte flipped"),
    ("delimited", "bluelabs", "gzip", "truncated"), ("delimited", "bluelabs", "bzip", "truncated"),
    ("delimited", "bluelabs", "gzip", "not compressed"),
])
def test_a_damaged_avro_or_compressed_delimited_file_is_a_task_naming_the_file_and_table(
        tmp_path: Path, records_format: str, variant: str | None, compression: str, damage: str) -> None:
    from destination.on_disk.datafiles import read_data_file, write_data_file
    from destination.on_disk.records import TABLE_JSON
    from destination.records_formats.choice import records_choice
    from destination.storage.base import StorageSpec
    from destination.storage.local import LocalStorage

    storage = LocalStorage(StorageSpec(str(tmp_path)))
    fields = {"records_format": records_format, "records_compression": compression,
              **({"records_variant": variant} if variant else {})}
    shape = TableDef("orders", (*DAMAGED.columns, ColumnDef("s", "SHORT")))
    table_def = records_choice(fields).stamp(shape)
    storage.write_bytes(f"v1/{TABLE_JSON}", json.dumps({"table": table_def.to_json()}).encode())
    rows = pa.table({"id": list(range(2000)), "flag": [True] * 2000, "at": [dt.time(12, 0)] * 2000,
                     "n": [31337] * 2000, "s": [7] * 2000, META: [None] * 2000},
                    schema=arrow_schema(list(shape.columns)))
    written = write_data_file(storage, "v1", "part-x.parquet", rows, table_def, None)
    path = f"v1/{written.name}"
    data = storage.read_bytes(path)
    if damage == "a value beyond its type":  # as another writer might leave it: the SHORT column `s` is an Avro
        reader = fastavro.reader(io.BytesIO(data))  # int, which holds 987654; a SHORT does not
        schema, records = reader.writer_schema, list(reader)
        out = io.BytesIO()
        fastavro.writer(out, schema, [{**r, "s": 987654} for r in records])
        damaged = out.getvalue()
    elif damage == "a sync marker byte flipped":
        damaged = flip_a_block_sync_marker_byte(data)
    else:
        damaged = data[: len(data) // 2] if damage == "truncated" else b"id,flag\n" * 100
    storage.write_bytes(path, damaged)
    with pytest.raises(DamagedDataFile) as refused:
        read_data_file(storage, "v1", written.name)
    message = str(refused.value)
    assert storage.url(path) in message and "table 'orders'" in message, message
    assert "31337" not in message and "987654" not in message, message
    assert damage != "a value beyond its type" or "column 's'" in message, message
    assert damage != "a sync marker byte flipped" or "sync marker" in message, message


def flip_a_block_sync_marker_byte(data: bytes) -> bytes:
    """`data` (an Avro container file) with one byte of its first data block's sync marker flipped. The marker is
    found as the Avro spec places it: the file's last 16 bytes (the last block's), first met after the header."""
    marker = data[-16:]
    first_block_end = data.index(marker, data.index(marker) + 16)
    return data[:first_block_end + 5] + bytes([data[first_block_end + 5] ^ 0x01]) + data[first_block_end + 6:]


@pytest.mark.parametrize("blocks", [1, 3])
def test_the_fast_avro_reader_leaves_a_file_with_a_damaged_sync_marker_to_fastavros_refusal(
        monkeypatch: pytest.MonkeyPatch, blocks: int) -> None:
    """polars reads a block's bytes without checking the marker after them: the fast reader checks every block's
    against the header's, as fastavro does, so a damaged file is refused, never read as rows."""
    from destination.records_formats import avro, avro_decode, avro_encode

    table = edge_table()
    monkeypatch.setattr(avro_encode, "_BLOCK_BYTES", max(1, table.nbytes // blocks))
    buf = io.BytesIO()
    codec("avro").write(table, TABLE_DEF, buf)
    assert len(list(fastavro.block_reader(io.BytesIO(buf.getvalue())))) >= blocks
    damaged = flip_a_block_sync_marker_byte(buf.getvalue())
    with pytest.raises(ValueError, match="sync marker"):  # the oracle: fastavro refuses the file
        list(fastavro.reader(io.BytesIO(damaged)))
    assert avro_decode.read(damaged, avro.avro_schema(TABLE_DEF), arrow_schema(list(COLUMNS))) is None
    with pytest.raises(BadRequest, match=r"table 'every_type': an Avro data file does not read.*sync marker"):
        codec("avro").read(io.BytesIO(damaged), TABLE_DEF)


def test_a_file_without_the_header_row_its_variant_writes_is_refused_without_its_first_row() -> None:
    """Read with a header row, a file written without one takes its first record for the header: the refusal must not
    quote those names (they are a row's values)."""
    with_header = codec("delimited", "bluelabs", {"compression": None, "header-row": True})
    without = codec("delimited", "bluelabs", {"compression": None, "header-row": False})
    out = io.BytesIO()
    without.write(pa.table({"id": [4242], "flag": [True], "at": [dt.time(9, 30)], "n": [77], META: [None]},
                           schema=arrow_schema(list(DAMAGED.columns))), DAMAGED, out)
    with pytest.raises(BadRequest) as refused:
        with_header.read(io.BytesIO(out.getvalue()), DAMAGED)
    message = str(refused.value)
    assert "table 'orders'" in message and "column 1 is not 'id'" in message, message
    for value in ("4242", "09:30", "77"):
        assert value not in message, message


@pytest.mark.parametrize("damage", ["truncated", "overwritten", "pages"])
def test_a_damaged_parquet_data_file_is_a_task_naming_the_file(tmp_path: Path, damage: str) -> None:
    from destination.on_disk.datafiles import read_data_file
    from destination.storage.base import StorageSpec
    from destination.storage.local import LocalStorage

    storage = LocalStorage(StorageSpec(str(tmp_path)))
    whole = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(1000)), "secret": [f"row value {i}" for i in range(1000)]}), whole)
    data = whole.getvalue()
    quarter = len(data) // 4  # "pages": the footer intact, the column chunks' bytes overwritten (Arrow's OSError)
    damaged = {"truncated": data[: 2 * quarter], "overwritten": b"row value 7," * (len(data) // 12),
               "pages": data[:quarter] + b"\xff" * quarter + data[2 * quarter:]}[damage]
    storage.write_bytes("v1/part-x.parquet", damaged)
    with pytest.raises(DamagedDataFile) as refused:
        read_data_file(storage, "v1", "part-x.parquet")
    assert isinstance(refused.value, UserActionRequired)
    message = str(refused.value)
    assert storage.url("v1/part-x.parquet") in message and "Parquet" in message, message
    assert "row value" not in message, message
