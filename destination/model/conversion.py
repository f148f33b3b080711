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
import json.scanner
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model.table_model import ColumnDef
from destination.model.type_mapping import arrow_type

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


JsonSeen = dict[str, bool]  # JSON texts already checked, and whether they were JSON (one per column and file)
JSON_SEEN_LIMIT = 65_536


def convert_column(values: pa.Array, col: ColumnDef, json_seen: JsonSeen | None = None) -> tuple[pa.Array, list[Failure]]:
    """Convert a string (or binary, for BINARY) array to the column's Arrow type.

    Nulls stay null. Returns the typed array and the failures, one per bad value. `json_seen` carries a
    JSON column's checked texts from one block of a file to the next.
    """
    target = arrow_type(col)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if col.type == "JSON":
        return _convert_json(values, col, target, {} if json_seen is None else json_seen)
    if values.type == target:
        return values, []
    if col.type == "BINARY":
        return _convert_binary(values, col)
    if col.type == "NAIVE_TIME":  # Arrow has no text → time cast: parse on a fixed day, keep the time of day
        for normalize in (False, True):
            text = _normalize_timestamps(values, col) if normalize else values
            try:
                return pc.cast(pc.binary_join_element_wise("1970-01-01T", text, ""), pa.timestamp("us")).cast(target), []
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
    else:
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
    """Cut fractions to microseconds; a naive column (or a time of day) also drops a trailing `Z`."""
    out = pc.replace_substring_regex(values, _FRACTION_OVER_US.pattern, r"\1")
    if col.type in ("NAIVE_DATETIME", "NAIVE_TIME"):
        out = pc.replace_substring_regex(out, r"Z$", "")
    return out


def _convert_binary(values: pa.Array, col: ColumnDef) -> tuple[pa.Array, list[Failure]]:
    """BINARY arrives base64-encoded; text that is not valid base64 is kept as its raw UTF-8 bytes.
    Canonical base64 (the usual case) is decoded vectorized; anything else goes value by value."""
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values.cast(pa.binary()), []
    canonical = pc.fill_null(pc.match_substring_regex(values, _CANONICAL_BASE64), False)
    if pc.all(pc.or_(canonical, pc.is_null(values))).as_py():
        decoded = b64decode_array(pc.fill_null(values, ""))
        return pc.if_else(pc.is_null(values), pa.scalar(None, pa.binary()), decoded), []
    return _value_by_value(values, col, pa.binary(), _decode_base64)


def _decode_base64(v: str, col: ColumnDef) -> bytes:
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(TRUNCATED, SERIALIZATION_ERROR, v.encode("utf-8")) from None


_CANONICAL_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_SEXTET = np.zeros(256, dtype=np.uint8)
_SEXTET[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)] = np.arange(64)


def b64decode_array(text: pa.Array) -> pa.Array:
    """Decode an array of canonical base64 strings (see _CANONICAL_BASE64; no nulls) with numpy.
    Written by hand because neither pyarrow nor the standard library decodes many values at once: each value's
    length is a multiple of 4, so the values' concatenated characters are whole 4-character groups."""
    text = text.cast(pa.string())
    n = len(text)
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset:text.offset + n + 1].astype(np.int64)
    chars = np.frombuffer(text.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]] if n else np.zeros(0, np.uint8)
    s = _SEXTET[chars].reshape(-1, 4)
    groups = np.stack([(s[:, 0] << 2) | (s[:, 1] >> 4), ((s[:, 1] & 15) << 4) | (s[:, 2] >> 2),
                       ((s[:, 2] & 3) << 6) | s[:, 3]], axis=1).astype(np.uint8).reshape(-1)
    lengths = np.diff(offsets)
    ends = offsets[1:] - offsets[0]
    eq = np.uint8(ord("="))
    pads = np.zeros(n, dtype=np.int64)
    has = lengths > 0
    pads[has] = (chars[ends[has] - 1] == eq).astype(np.int64) + (chars[ends[has] - 2] == eq).astype(np.int64)
    full = lengths // 4 * 3
    keep_len = full - pads
    within = np.arange(int(full.sum()), dtype=np.int64) - np.repeat(np.cumsum(full) - full, full)
    data = groups[within < np.repeat(keep_len, full)]
    new_offsets = np.concatenate([[0], np.cumsum(keep_len)]).astype(np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(new_offsets.tobytes()), pa.py_buffer(data.tobytes())])


_JSON_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed: the class, not a decoder
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def _is_json(text: str) -> bool:
    """What json.loads accepts, without its per-call wrapping (the scanner is the C one)."""
    try:
        _value, end = _JSON_SCAN(text, _JSON_SPACE.match(text, 0).end())  # type: ignore[union-attr]
    except (StopIteration, ValueError, RecursionError):
        return False
    return _JSON_SPACE.match(text, end).end() == len(text)  # type: ignore[union-attr]


def _convert_json(values: pa.Array, col: ColumnDef, target: pa.DataType, seen: JsonSeen) -> tuple[pa.Array, list[Failure]]:
    """JSON stays text; a value that is not JSON becomes NULL with a recorded change. Each distinct value is
    checked once (JSON columns repeat values often), and `seen` remembers the checks across blocks."""
    text = values.cast(target)
    encoded = pc.dictionary_encode(text)
    if len(seen) > JSON_SEEN_LIMIT:
        seen.clear()
    valid = np.fromiter((seen[v] if v in seen else seen.setdefault(v, _is_json(v))
                         for v in encoded.dictionary.to_pylist()), dtype=bool, count=len(encoded.dictionary))
    bad = pc.fill_null(pc.invert(pc.take(pa.array(valid), encoded.indices)), False)
    if not pc.any(bad).as_py():
        return text, []
    rows = pc.indices_nonzero(bad).to_pylist()
    return pc.if_else(bad, pa.scalar(None, target), text), [Failure(i, col.name, NULLED, SERIALIZATION_ERROR) for i in rows]


def _python_fallback(values: pa.Array, col: ColumnDef, target: pa.DataType) -> tuple[pa.Array, list[Failure]]:
    return _value_by_value(values, col, target, _PARSERS[col.type])


def _value_by_value(values: pa.Array, col: ColumnDef, target: pa.DataType,
                    parse: Callable[[str, ColumnDef], Any]) -> tuple[pa.Array, list[Failure]]:
    """`parse` each value: one that raises `_Bad` takes its replacement and records its change, any other error
    makes it NULL as a serialization error."""
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
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _parse_naive(v: str, col: ColumnDef) -> dt.datetime:
    value = _iso_datetime(v)
    return value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)


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


FailureKey = tuple[str, str, str]  # (column, change, reason)
_REASON_TEXT = {SERIALIZATION_ERROR: "not convertible to the column type", SIZE_LIMITATION: "over the type's size limit"}
_CHANGE_TEXT = {NULLED: "stored as NULL", TRUNCATED: "kept as their raw bytes (not valid base64)"}


def count_by_column(failures: list[Failure]) -> dict[FailureKey, int]:
    """Failures counted per column, change and reason: what the write's log reports (never the values)."""
    return dict(Counter((f.field, f.change, f.reason) for f in failures))


def failure_summary(key: FailureKey, count: int) -> str:
    column, change, reason = key
    return (f"column {column!r}: {count} value(s) {_CHANGE_TEXT.get(change, change)}, "
            f"{reason} ({_REASON_TEXT.get(reason, reason)}); recorded in _destination_meta")
