"""Text → typed Arrow conversion with captured failures (never fails a batch).

Each column is first converted with one vectorized Arrow cast. Only when that
cast fails (a value Arrow cannot parse, more digits than the type holds, TIME
values, NaN spelled the Java way) does the column fall back to a per-value
Python conversion, which turns each bad value into NULL (or, for BINARY, the raw
bytes) and records a change `{field, change, reason}` for that row, following
Airbyte's `changes[]` (fivetran-protocol.md §10.8).
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from destination.table_model import ColumnDef
from destination.type_mapping import arrow_type

NULLED = "NULLED"
TRUNCATED = "TRUNCATED"
SERIALIZATION_ERROR = "DESTINATION_SERIALIZATION_ERROR"
SIZE_LIMITATION = "DESTINATION_FIELD_SIZE_LIMITATION"

_INT_BOUNDS = {"SHORT": 2**15, "INT": 2**31, "LONG": 2**63}
_FRACTION_OVER_US = re.compile(r"(\.\d{6})\d+")


@dataclass(frozen=True)
class Failure:
    row: int
    field: str
    change: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "change": self.change, "reason": self.reason}


class _Bad(Exception):
    def __init__(self, change: str, reason: str, replacement: Any = None) -> None:
        self.change, self.reason, self.replacement = change, reason, replacement


def convert_column(values: pa.Array, col: ColumnDef) -> tuple[pa.Array, list[Failure]]:
    """Convert a string (or binary, for BINARY) array to the column's Arrow type.

    Nulls stay null. Returns the typed array and the failures, one per bad value.
    """
    target = arrow_type(col)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if col.type == "JSON":
        return _python_fallback(values, col, target)
    if values.type == target:
        return values, []
    if col.type == "BINARY":
        return _convert_binary(values, col)
    if col.type not in ("NAIVE_TIME",):
        try:
            return _within_calendar(pc.cast(values, target), col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        if col.type in ("UTC_DATETIME", "NAIVE_DATETIME"):
            try:
                return _within_calendar(pc.cast(_normalize_timestamps(values, col), target), col)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
    return _python_fallback(values, col, target)


# Years 1..9999: what Spark, Python, Redshift and most readers hold. Arrow also parses year 0 and beyond.
_DATE_RANGE = (-719162, 2932896)  # days since the epoch of 0001-01-01 and 9999-12-31
_MICROS_RANGE = (_DATE_RANGE[0] * 86_400_000_000, (_DATE_RANGE[1] + 1) * 86_400_000_000 - 1)


def _within_calendar(typed: pa.Array, col: ColumnDef) -> tuple[pa.Array, list[Failure]]:
    """Dates and timestamps outside years 1..9999 become NULL with a recorded change."""
    if col.type == "NAIVE_DATE":
        raw, (lo, hi) = typed.cast(pa.int32()), _DATE_RANGE
    elif col.type in ("UTC_DATETIME", "NAIVE_DATETIME"):
        raw, (lo, hi) = typed.cast(pa.int64()), _MICROS_RANGE
    else:
        return typed, []
    outside = pc.fill_null(pc.or_(pc.less(raw, lo), pc.greater(raw, hi)), False)
    if not pc.any(outside).as_py():
        return typed, []
    rows = pc.indices_nonzero(outside).to_pylist()
    cleaned = pc.if_else(outside, pa.scalar(None, typed.type), typed)
    return cleaned, [Failure(i, col.name, NULLED, SIZE_LIMITATION) for i in rows]


def _normalize_timestamps(values: pa.Array, col: ColumnDef) -> pa.Array:
    """Cut fractions to microseconds; a naive column also drops a trailing `Z`."""
    out = pc.replace_substring_regex(values, _FRACTION_OVER_US.pattern, r"\1")
    if col.type == "NAIVE_DATETIME":
        out = pc.replace_substring_regex(out, r"Z$", "")
    return out


def _convert_binary(values: pa.Array, col: ColumnDef) -> tuple[pa.Array, list[Failure]]:
    """BINARY arrives base64-encoded; text that is not valid base64 is kept as its raw UTF-8 bytes."""
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values.cast(pa.binary()), []
    out: list[bytes | None] = []
    failures: list[Failure] = []
    for i, v in enumerate(values.to_pylist()):
        if v is None:
            out.append(None)
            continue
        try:
            out.append(base64.b64decode(v, validate=True))
        except (binascii.Error, ValueError):
            out.append(v.encode("utf-8"))
            failures.append(Failure(i, col.name, TRUNCATED, SERIALIZATION_ERROR))
    return pa.array(out, pa.binary()), failures


def _python_fallback(values: pa.Array, col: ColumnDef, target: pa.DataType) -> tuple[pa.Array, list[Failure]]:
    parse = _PARSERS[col.type]
    out: list[Any] = []
    failures: list[Failure] = []
    for i, v in enumerate(values.to_pylist()):
        if v is None:
            out.append(None)
            continue
        try:
            out.append(parse(v if isinstance(v, str) else str(v), col))
        except _Bad as bad:
            out.append(bad.replacement)
            failures.append(Failure(i, col.name, bad.change, bad.reason))
        except (ValueError, TypeError, ArithmeticError, OverflowError):
            out.append(None)
            failures.append(Failure(i, col.name, NULLED, SERIALIZATION_ERROR))
    return pa.array(out, target), failures


def _parse_bool(v: str, col: ColumnDef) -> bool:
    low = v.strip().lower()
    if low in ("true", "t", "1", "yes"):
        return True
    if low in ("false", "f", "0", "no"):
        return False
    raise ValueError(v)


def _parse_int(v: str, col: ColumnDef) -> int:
    text = v.strip()
    try:
        n = int(text)
    except ValueError:
        d = decimal.Decimal(text)
        if d != d.to_integral_value():
            raise
        n = int(d)
    bound = _INT_BOUNDS[col.type]
    if not -bound <= n < bound:
        raise _Bad(NULLED, SIZE_LIMITATION)
    return n


def _parse_float(v: str, col: ColumnDef) -> float:
    text = v.strip()
    special = {"nan": math.nan, "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf,
               "inf": math.inf, "-inf": -math.inf}
    if text.lower() in special:
        return special[text.lower()]
    f = float(text)
    if col.type == "FLOAT" and math.isfinite(f) and abs(f) > 3.4028234663852886e38:
        raise _Bad(NULLED, SIZE_LIMITATION)
    return f


def _parse_decimal(v: str, col: ColumnDef) -> decimal.Decimal:
    d = decimal.Decimal(v.strip())
    if not d.is_finite():
        raise ValueError(v)
    scale = col.scale or 0
    ctx = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_EVEN)
    q = d.quantize(decimal.Decimal(1).scaleb(-scale), context=ctx)
    if len(q.as_tuple().digits) > (col.precision or 38) and q != 0:
        raise _Bad(NULLED, SIZE_LIMITATION)
    return q


def _outside_calendar(text: str) -> None:
    if text.startswith(("0000-", "-", "+")) or re.match(r"^\d{5,}-", text):
        raise _Bad(NULLED, SIZE_LIMITATION)


def _parse_date(v: str, col: ColumnDef) -> dt.date:
    text = v.strip()
    _outside_calendar(text)
    if "T" in text or " " in text:
        text = re.split(r"[T ]", text, maxsplit=1)[0]
    return dt.date.fromisoformat(text)


def _iso_datetime(text: str) -> dt.datetime:
    text = _FRACTION_OVER_US.sub(r"\1", text.strip())
    _outside_calendar(text)
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    return dt.datetime.fromisoformat(text)


def _parse_utc(v: str, col: ColumnDef) -> dt.datetime:
    value = _iso_datetime(v)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def _parse_naive(v: str, col: ColumnDef) -> dt.datetime:
    value = _iso_datetime(v)
    return value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _parse_time(v: str, col: ColumnDef) -> dt.time:
    text = _FRACTION_OVER_US.sub(r"\1", v.strip())
    if text.endswith(("Z", "z")):
        text = text[:-1]
    return dt.time.fromisoformat(text).replace(tzinfo=None)


def _parse_json(v: str, col: ColumnDef) -> str:
    json.loads(v)
    return v


def _identity(v: str, col: ColumnDef) -> str:
    return v


_PARSERS: dict[str, Callable[[str, ColumnDef], Any]] = {
    "BOOLEAN": _parse_bool,
    "SHORT": _parse_int,
    "INT": _parse_int,
    "LONG": _parse_int,
    "DECIMAL": _parse_decimal,
    "FLOAT": _parse_float,
    "DOUBLE": _parse_float,
    "NAIVE_DATE": _parse_date,
    "NAIVE_DATETIME": _parse_naive,
    "UTC_DATETIME": _parse_utc,
    "NAIVE_TIME": _parse_time,
    "JSON": _parse_json,
    "XML": _identity,
    "STRING": _identity,
}


def changes_column(failures: list[Failure], num_rows: int) -> pa.Array:
    """Per-row JSON list of changes (null where the row converted cleanly)."""
    if not failures:
        return pa.nulls(num_rows, pa.string())
    per_row: dict[int, list[dict[str, str]]] = {}
    for f in failures:
        per_row.setdefault(f.row, []).append(f.to_json())
    return pa.array([json.dumps(per_row[i]) if i in per_row else None for i in range(num_rows)], pa.string())


def count_by_column(failures: list[Failure]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in failures:
        counts[f.field] = counts.get(f.field, 0) + 1
    return counts
