"""How the tester turns input JSON values into batch-file text (it reads JSON numbers as Java doubles)."""
from __future__ import annotations

import datetime as dt
import decimal
from typing import Any


def java_double(x: float) -> str:
    """Java's Double.toString: plain between 1e-3 and 1e7, else scientific `d.dddE±n` (shortest digits)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0.0"
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)  # Python's repr is plain in this range and keeps a ".0"
    d = decimal.Decimal(repr(abs(x)))
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:] or '0'}E{d.adjusted()}"


def text_of(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value)


def instant(ms: int) -> str:
    """An ISO instant with Z; the fraction left out when zero, as the tester prints it."""
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    base = t.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}Z" if t.microsecond == 0 else f"{base}.{t.microsecond // 1000:03d}Z"


def parse_instant(text: str) -> dt.datetime:
    """An ISO instant (0-9 fraction digits, `Z` or an offset, or none: UTC) at microsecond precision."""
    text = text.strip().replace("Z", "+00:00")
    if "." in text:
        head, rest = text.split(".", 1)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)].ljust(6, '0')}{rest[digits:]}"
    value = dt.datetime.fromisoformat(text)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def minus_one_ms(text: str) -> str:
    """The instant 1 ms before `text`, keeping its microseconds (a version's end before the next start)."""
    return (parse_instant(text) - dt.timedelta(milliseconds=1)).isoformat(timespec="microseconds").replace("+00:00", "Z")


TMAX = "9999-12-31T23:59:59.999Z"
