"""Text → typed conversion of every Fivetran DataType, with captured failures."""
from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa
import pytest

from destination.model.conversion import NULLED, SERIALIZATION_ERROR, SIZE_LIMITATION, TRUNCATED, convert_column
from destination.model.table_model import ColumnDef

UTC = dt.UTC


def conv(values, **kw):  # type: ignore[no-untyped-def]
    arr, failures = convert_column(pa.array(values, pa.string()), ColumnDef("c", **kw))
    return arr.to_pylist(), [(f.row, f.change, f.reason) for f in failures]


@pytest.mark.parametrize("kw,values,expected", [
    ({"type": "BOOLEAN"}, ["true", "false", None], [True, False, None]),
    ({"type": "SHORT"}, ["-32768", "32767"], [-32768, 32767]),
    ({"type": "INT"}, ["2147483647"], [2147483647]),
    ({"type": "LONG"}, ["-9223372036854775808"], [-9223372036854775808]),
    ({"type": "DECIMAL", "precision": 38, "scale": 10}, ["1234567890123456789012345678.0123456789"],
     [decimal.Decimal("1234567890123456789012345678.0123456789")]),
    ({"type": "DECIMAL", "precision": 38, "scale": 37}, ["1.2345678901234567890123456789012345678"],
     [decimal.Decimal("1.2345678901234567890123456789012345678")]),
    ({"type": "DECIMAL", "precision": 38, "scale": 10}, ["1.2345678901234568E22"],
     [decimal.Decimal("12345678901234568000000.0000000000")]),
    ({"type": "NAIVE_DATE"}, ["0001-01-01", "9999-12-31"], [dt.date(1, 1, 1), dt.date(9999, 12, 31)]),
    ({"type": "NAIVE_DATETIME"}, ["2025-08-19T12:00:05.123", "0001-01-01T00:00:00"],
     [dt.datetime(2025, 8, 19, 12, 0, 5, 123000), dt.datetime(1, 1, 1)]),
    ({"type": "UTC_DATETIME"}, ["2025-11-21T14:54:16Z", "2024-02-03T12:44:22.123456789Z", "9999-12-31T23:59:59.999999Z"],
     [dt.datetime(2025, 11, 21, 14, 54, 16, tzinfo=UTC), dt.datetime(2024, 2, 3, 12, 44, 22, 123456, tzinfo=UTC),
      dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]),
    ({"type": "NAIVE_TIME"}, ["15:00", "10:15:30.5"], [dt.time(15, 0), dt.time(10, 15, 30, 500000)]),
    ({"type": "STRING"}, ["", "x"], ["", "x"]),
    ({"type": "XML"}, ["<a>1</a>"], ["<a>1</a>"]),
    ({"type": "JSON"}, ['{"a": 1}'], ['{"a": 1}']),
    ({"type": "BINARY"}, ["3q2+7w=="], [b"\xde\xad\xbe\xef"]),
])
def test_every_type_converts(kw, values, expected):  # type: ignore[no-untyped-def]
    out, failures = conv(values, **kw)
    assert failures == []
    if kw["type"] == "UTC_DATETIME":
        out = [v.astimezone(UTC) for v in out]
    assert out == expected


def test_float_special_values_and_float32():  # type: ignore[no-untyped-def]
    out, failures = conv(["NaN", "Infinity", "-Infinity", "10.12"], type="FLOAT")
    assert failures == [] and math.isnan(out[0]) and out[1:3] == [math.inf, -math.inf]
    assert out[3] == pytest.approx(10.12, rel=1e-7) and out[3] != 10.12  # stored as float32


@pytest.mark.parametrize("kw,value,change,reason,stored", [
    ({"type": "SHORT"}, "99999", NULLED, SIZE_LIMITATION, None),
    ({"type": "LONG"}, "9223372036854775808", NULLED, SIZE_LIMITATION, None),
    ({"type": "INT"}, "abc", NULLED, SERIALIZATION_ERROR, None),
    ({"type": "NAIVE_DATE"}, "2024-13-45", NULLED, SERIALIZATION_ERROR, None),
    ({"type": "UTC_DATETIME"}, "yesterday", NULLED, SERIALIZATION_ERROR, None),
    ({"type": "DECIMAL", "precision": 6, "scale": 3}, "12345.5", NULLED, SIZE_LIMITATION, None),
    ({"type": "JSON"}, "{not json", NULLED, SERIALIZATION_ERROR, None),
    ({"type": "BINARY"}, "[B@7d4991ad", TRUNCATED, SERIALIZATION_ERROR, b"[B@7d4991ad"),
])
def test_bad_values_are_captured_not_fatal(kw, value, change, reason, stored):  # type: ignore[no-untyped-def]
    out, failures = conv(["1" if kw["type"] not in ("BINARY", "JSON", "NAIVE_DATE", "UTC_DATETIME") else None, value], **kw)
    assert out[1] == stored
    assert failures == [(1, change, reason)]


@pytest.mark.parametrize("kw,value", [({"type": "NAIVE_DATE"}, "0000-01-01"),
                                      ({"type": "NAIVE_DATETIME"}, "0000-01-01T00:00:00"),
                                      ({"type": "UTC_DATETIME"}, "0000-01-01T00:00:00.000000000Z")])
def test_dates_outside_years_1_to_9999_are_captured(kw, value):  # type: ignore[no-untyped-def]
    out, failures = conv(["9999-12-31" if kw["type"] == "NAIVE_DATE" else "9999-12-31T23:59:59.999999", value], **kw)
    assert out[1] is None and out[0] is not None
    assert failures == [(1, NULLED, SIZE_LIMITATION)]


def test_vectorized_base64_matches_the_standard_library() -> None:
    import base64
    import os

    from destination.model.conversion import b64decode_array

    raw = [os.urandom(n) for n in [0, 1, 2, 3, 4, 5, 30, 31, 32, 255] * 20]
    text = [base64.b64encode(b).decode() for b in raw]
    sliced = pa.array(["pad", *text])[1:]  # an array that starts at an offset
    assert b64decode_array(sliced).to_pylist() == raw
    out, failures = conv([text[1], None, "QR==", "not base64!", text[8]], type="BINARY")
    assert out == [raw[1], None, b"A", b"not base64!", raw[8]]  # the fast path falls back per value when needed
    assert failures == [(3, TRUNCATED, SERIALIZATION_ERROR)]


def test_times_and_json_in_bulk() -> None:
    out, failures = conv(["23:59:59.9999999Z", "00:00", None, "12:34:56"] * 500, type="NAIVE_TIME")
    assert failures == [] and out[:4] == [dt.time(23, 59, 59, 999999), dt.time(0, 0), None, dt.time(12, 34, 56)]
    out, failures = conv(["25:00", "12:00"], type="NAIVE_TIME")
    assert out == [None, dt.time(12)] and failures == [(0, NULLED, SERIALIZATION_ERROR)]
    values = ['{"a": [1, 2]}', " 3 ", '"text"', "{not json", None, "[1] [2]", "NaN"] * 300
    out, failures = conv(values, type="JSON")
    bad = {i for i, v in enumerate(values) if v in ("{not json", "[1] [2]")}
    assert [f[0] for f in failures] == sorted(bad)
    assert all(out[i] is None if i in bad else out[i] == v for i, v in enumerate(values))
