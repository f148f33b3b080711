"""An independent, deliberately simple model of what a destination must hold after a tester input file
(fivetran-protocol §1.2, §5, §10), used as the oracle of the conformance tests. Plain tables only.

It follows the harness's grouping: rows per table and kind between truncates, applied replace → update → delete,
each in input order; a truncate (all earlier rows are before its cutoff) empties or soft-deletes the table.
Values are compared after canonicalising both sides per column type (see `canon`)."""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import struct
from typing import Any

from destination.tester.values import text_of

ORDER = "\x00order"


class ModelTable:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.types: dict[str, Any] = dict(spec["columns"])
        self.pk: list[str] = list(spec.get("primary_key", [])) or ["_fivetran_id"]
        self.history = bool(spec.get("history_mode"))
        self.rows: dict[tuple, dict[str, Any]] = {}

    def key(self, row: dict[str, Any]) -> tuple:
        return tuple(canon(row.get(k), self.type_of(k)) for k in self.pk)

    def type_of(self, name: str) -> Any:
        return self.types.get(name, "STRING")

    def alter(self, spec: dict[str, Any]) -> None:
        for name, t in spec["columns"].items():
            self.types[name] = t
        new_pk = list(spec.get("primary_key", [])) or ["_fivetran_id"]
        if new_pk != self.pk:
            self.pk = new_pk
            self.rows = {self.key(r): r for r in self.rows.values()}


class Model:
    def __init__(self) -> None:
        self.tables: dict[str, ModelTable] = {}
        self.counter = 0

    def run(self, data: dict[str, Any]) -> None:
        for name, spec in (data.get("create_table") or {}).items():
            self.tables[name] = ModelTable(spec)
        for name, spec in (data.get("alter_table") or {}).items():
            self.tables[name].alter(spec)
        pending: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for op in data.get("ops") or []:
            ((kind, body),) = op.items()
            if kind in ("truncate_before", "soft_truncate_before"):
                self.flush(pending)
                pending = {}
                for name in body:
                    t = self.tables.get(name)
                    if t is None:
                        continue
                    if kind == "truncate_before":
                        t.rows.clear()
                    else:
                        for r in t.rows.values():
                            r["_fivetran_deleted"] = True
                continue
            for name, rows in body.items():
                for row in rows:  # remember the input order across update and soft_delete ops
                    self.counter += 1
                    pending.setdefault(name, {}).setdefault(kind, []).append({**row, ORDER: self.counter})
        self.flush(pending)

    def flush(self, pending: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
        for name, kinds in pending.items():
            t = self.tables[name]
            if t.history:
                continue
            for row in kinds.get("upsert", []):
                full: dict[str, Any] = {c: row.get(c) for c in t.types}
                full["_fivetran_id"] = row.get("_fivetran_id")
                full["_fivetran_deleted"] = False
                t.rows[t.key(row)] = full
            updates = [(r, False) for r in kinds.get("update", [])] + [(r, True) for r in kinds.get("soft_delete", [])]
            for row, soft in sorted(updates, key=lambda pair: pair[0][ORDER]):
                k = t.key(row)
                if k not in t.rows:
                    continue
                for c, v in row.items():
                    if c not in ("op_time", ORDER):
                        t.rows[k][c] = v
                t.rows[k]["_fivetran_deleted"] = soft
            for row in kinds.get("delete", []):
                t.rows.pop(t.key(row), None)


def canon(value: Any, ftype: Any) -> Any:
    """A comparable form of a value, from either the input JSON or the stored Arrow value."""
    if value is None:
        return None
    t = ftype["type"] if isinstance(ftype, dict) else ftype
    if t in ("SHORT", "INT", "LONG"):
        return int(value)
    if t == "FLOAT":
        return struct.unpack("f", struct.pack("f", float(value)))[0]
    if t == "DOUBLE":
        return float(value)
    if t == "DECIMAL":
        scale = ftype.get("scale", 10) if isinstance(ftype, dict) else 10
        text = text_of(value) if isinstance(value, float) else str(value)
        return decimal.Decimal(text).quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_EVEN)
    if t == "BOOLEAN":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if isinstance(value, str) and t in ("NAIVE_DATE", "UTC_DATETIME", "NAIVE_DATETIME") and value.startswith("0000-"):
        return None  # outside years 1..9999: stored as NULL with a recorded change
    if t == "NAIVE_DATE":
        return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value)[:10])
    if t in ("UTC_DATETIME", "NAIVE_DATETIME"):
        if isinstance(value, dt.datetime):
            return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo else value
        text = str(value).replace("Z", "+00:00")
        if "." in text:
            head, frac = text.split(".", 1)
            digits = "".join(ch for ch in frac if ch.isdigit())
            rest = frac[len(digits):]
            text = f"{head}.{digits[:6]}{rest}"
        parsed = dt.datetime.fromisoformat(text)
        return parsed.astimezone(dt.timezone.utc).replace(tzinfo=None) if parsed.tzinfo else parsed
    if t == "NAIVE_TIME":
        return value if isinstance(value, dt.time) else dt.time.fromisoformat(str(value))
    if t == "BINARY":
        if isinstance(value, bytes):
            return value
        try:
            return base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            return str(value).encode()
    if isinstance(value, bytes):
        return value.decode()
    return str(value) if not isinstance(value, (int, float, bool)) else text_of(value)
