"""An independent, deliberately simple model of what a destination must hold after a tester input file
(fivetran-protocol §1.2, §5, §10), used as the oracle of the conformance tests.

It follows the harness's grouping: rows per table and kind between truncates, applied replace → update → delete,
each in input order; a truncate (all earlier rows are before its cutoff) empties or soft-deletes the table.
History tables hold versions keyed by (key, start) and follow the upstream document's steps literally, one
statement at a time: earliest start, versions in start order (an update copies the latest version), deletes.
Values are compared after canonicalising both sides per column type (see `canon`)."""
from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import decimal
import struct
from typing import Any

from destination.tester.values import parse_instant, text_of

ORDER = "\x00order"
START, END, ACTIVE, DELETED = "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_deleted"
TMAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999000)
TMIN = dt.datetime(1, 1, 1)  # start and end of a soft-deleted row moved to history mode
ONE_MS = dt.timedelta(milliseconds=1)
LATEST_SYNCED = dt.datetime(1111, 11, 11)  # stands for the table's latest _fivetran_synced (not known here)
SYNCED = "_fivetran_synced"
FIRST_STAMP_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z: the first stamp of a harness that stamps 1 ms apart


class ModelTable:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.types: dict[str, Any] = dict(spec["columns"])
        self.pk: list[str] = list(spec.get("primary_key", [])) or ["_fivetran_id"]
        self.history = bool(spec.get("history_mode"))
        self.soft_deleted = False  # a history table gets _fivetran_deleted with its first soft delete
        self.rows: dict[tuple, dict[str, Any]] = {}  # history tables: by key + (start,)

    def key(self, row: dict[str, Any]) -> tuple:
        return tuple(canon(row.get(k), self.type_of(k)) for k in self.pk)

    def type_of(self, name: str) -> Any:
        return self.types.get(name, "STRING")

    def version_key(self, row: dict[str, Any]) -> tuple:
        return (*self.key(row), canon(row[START], "UTC_DATETIME"))

    def versions(self, key: tuple) -> list[dict[str, Any]]:
        return sorted((r for r in self.rows.values() if self.key(r) == key), key=lambda r: canon(r[START], "UTC_DATETIME"))

    def alter(self, spec: dict[str, Any]) -> None:
        for name, t in spec["columns"].items():
            self.types[name] = t
        new_pk = list(spec.get("primary_key", [])) or ["_fivetran_id"]
        if new_pk != self.pk:
            self.pk = new_pk
            self.rows = {self.key(r): r for r in self.rows.values()}


class Model:
    """Rows are stamped as the harness does: every row, and every truncate's cutoff, takes the next millisecond
    from FIRST_STAMP_MS (tests run the harness with that clock), so `_fivetran_synced` is known."""

    def __init__(self) -> None:
        self.tables: dict[str, ModelTable] = {}
        self.counter = 0
        self.last_stamp_ms = FIRST_STAMP_MS - 1

    def stamp(self) -> dt.datetime:
        self.last_stamp_ms += 1
        return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=self.last_stamp_ms)

    def run(self, data: dict[str, Any]) -> None:
        for name, spec in (data.get("create_table") or {}).items():
            self.tables[name] = ModelTable(spec)
        for name, spec in (data.get("alter_table") or {}).items():
            self.tables[name].alter(spec)
        pending: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for op in data.get("ops") or []:
            ((kind, body),) = op.items()
            if kind in ("truncate_before", "soft_truncate_before"):
                self.stamp()  # the cutoff
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
                            r[DELETED] = True
                continue
            for name, rows in body.items():
                for row in rows:  # remember the input order across update and soft_delete ops
                    self.counter += 1
                    pending.setdefault(name, {}).setdefault(kind, []).append({**row, ORDER: self.counter,
                                                                              SYNCED: self.stamp()})
        self.flush(pending)
        for element in data.get("schema_migration") or []:
            for op_name, specs in element.items():
                for spec in specs:
                    self.migrate(op_name, spec)

    def migrate(self, op: str, spec: dict[str, Any]) -> None:
        """One schema_migration op, as schema-migration-helper-service.md describes it."""
        if op in ("copy_table", "rename_table", "copy_table_to_history_mode"):
            source = self.tables[spec["from_table"]]
            target = copy.deepcopy(source)
            if op == "rename_table":
                del self.tables[spec["from_table"]]
            self.tables[spec["to_table"]] = target
            if op == "copy_table_to_history_mode":
                to_history(target, spec.get("deleted_column", DELETED))
            return
        t = self.tables[spec["table"]]
        column = spec.get("column")
        if op == "drop_table":
            del self.tables[spec["table"]]
        elif op in ("add_column", "change_column_data_type"):
            t.types[column] = spec["data_type"]
        elif op == "drop_column":
            del t.types[column]
            for r in t.rows.values():
                r.pop(column, None)
        elif op in ("copy_column", "rename_column"):
            t.types[spec["to_column"]] = t.types[spec["from_column"]]
            for r in t.rows.values():
                r[spec["to_column"]] = r.get(spec["from_column"])
            if op == "rename_column":
                del t.types[spec["from_column"]]
                for r in t.rows.values():
                    r.pop(spec["from_column"], None)
        elif op in ("update_column_value", "set_column_to_null", "add_column_with_default_value"):
            value = spec.get("default_value", spec.get("value"))
            if op == "add_column_with_default_value":
                t.types.setdefault(column, spec["data_type"])
            for r in t.rows.values():
                r[column] = None if op == "set_column_to_null" or value == "NULL" else value
        elif op in ("add_column_in_history_mode", "drop_column_in_history_mode"):
            adding = op == "add_column_in_history_mode"
            if adding:
                t.types.setdefault(column, spec["data_type"])
            ts = instant_of(spec["operation_timestamp"])
            for r in list(t.rows.values()):
                if r[ACTIVE] and r[START] < ts and (adding or r.get(column) is not None):
                    t.rows[t.version_key({**r, START: ts})] = {**r, START: ts, END: TMAX, ACTIVE: True}
                    r[ACTIVE], r[END] = False, ts - ONE_MS
            for r in t.rows.values():
                if r[START] >= ts:
                    r[column] = spec["default_value"] if adding else None
        elif op == "migrate_soft_delete_to_history":
            to_history(t, spec.get("deleted_column", DELETED))
        elif op == "migrate_history_to_soft_delete":
            deleted = spec.get("deleted_column", DELETED)
            latest: dict[tuple, dict[str, Any]] = {}
            for r in t.rows.values():
                k = t.key(r)
                if k not in latest or r[START] > latest[k][START]:
                    latest[k] = r
            t.history = False
            t.rows = {k: {**{c: v for c, v in r.items() if c not in (START, END, ACTIVE)}, deleted: not r[ACTIVE]}
                      for k, r in latest.items()}
        else:
            raise AssertionError(f"the model has no migration {op!r}")

    def flush(self, pending: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
        for name, kinds in pending.items():
            t = self.tables[name]
            if t.history:
                flush_history(t, kinds)
                continue
            for row in kinds.get("upsert", []):
                full: dict[str, Any] = {c: row.get(c) for c in t.types}
                full["_fivetran_id"] = row.get("_fivetran_id")
                full["_fivetran_deleted"] = False
                full[SYNCED] = row[SYNCED]
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


def flush_history(t: ModelTable, kinds: dict[str, list[dict[str, Any]]]) -> None:
    """One WriteHistoryBatch, as the upstream how-to-handle-history-mode-batch-files document describes it."""
    if "soft_delete" in kinds:
        t.soft_deleted = True
    requested: dict[tuple, list[tuple[str, dict[str, Any]]]] = {}
    for kind in ("upsert", "update", "soft_delete"):
        for row in kinds.get(kind, []):
            requested.setdefault(t.key(row), []).append((kind, {**row, START: instant_of(row["op_time"])}))
    for key, rows in requested.items():
        rows.sort(key=lambda pair: pair[1][START])
        earliest = rows[0][1][START]
        for r in t.versions(key):  # remove later versions, close the one still open at the earliest start
            if r[START] >= earliest:
                del t.rows[t.version_key(r)]
            elif r[ACTIVE] or r[END] >= earliest:  # the document's example table closes both kinds
                r[ACTIVE], r[END] = False, earliest - ONE_MS
        for i, (kind, row) in enumerate(rows):
            last = i == len(rows) - 1
            if kind == "upsert":
                version = {c: row.get(c) for c in t.types}
                version[DELETED] = False if t.soft_deleted else None
            else:
                existing = t.versions(key)
                if not existing:
                    continue  # an update of a key without any version inserts nothing
                version = {c: v for c, v in existing[-1].items() if c not in (START, END, ACTIVE)}
                version.update({c: v for c, v in row.items() if c in t.types})
                if t.soft_deleted:
                    version[DELETED] = kind == "soft_delete"
            for c in t.pk:
                version[c] = row.get(c)
            version[SYNCED] = row[SYNCED]
            version[START] = row[START]
            version[END] = TMAX if last else rows[i + 1][1][START] - ONE_MS
            version[ACTIVE] = last
            t.rows[t.version_key(version)] = version
    for row in kinds.get("delete", []):
        for r in t.versions(t.key(row)):
            if r[ACTIVE]:
                r[ACTIVE], r[END], r[SYNCED] = False, instant_of(row["op_time"]), row[SYNCED]


def to_history(t: ModelTable, deleted: str) -> None:
    """SOFT_DELETE_TO_HISTORY: live rows start at the latest synced stamp, deleted ones at TMIN, inactive."""
    t.history = True
    t.soft_deleted = False
    t.types.pop(deleted, None)
    rows = list(t.rows.values())
    t.rows = {}
    for r in rows:
        gone = bool(r.pop(deleted, False))
        r[START], r[END], r[ACTIVE] = (TMIN, TMIN, False) if gone else (LATEST_SYNCED, TMAX, True)
        t.rows[t.version_key(r)] = r


def instant_of(text: str) -> dt.datetime:
    return parse_instant(text).replace(tzinfo=None)


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
        with decimal.localcontext(decimal.Context(prec=80)):
            return decimal.Decimal(text).quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_EVEN)
    if t == "BOOLEAN":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if isinstance(value, str) and t in ("NAIVE_DATE", "UTC_DATETIME", "NAIVE_DATETIME") and value.startswith("0000-"):
        return None  # outside years 1..9999: stored as NULL with a recorded change
    if t == "NAIVE_DATE":
        return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value)[:10])
    if t in ("UTC_DATETIME", "NAIVE_DATETIME"):
        if isinstance(value, dt.datetime):
            return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
        text = str(value).replace("Z", "+00:00")
        if "." in text:
            head, frac = text.split(".", 1)
            digits = "".join(ch for ch in frac if ch.isdigit())
            rest = frac[len(digits):]
            text = f"{head}.{digits[:6]}{rest}"
        parsed = dt.datetime.fromisoformat(text)
        return parsed.astimezone(dt.UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
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


def history_violations(rows: list[dict[str, Any]], key: list[str]) -> list[str]:
    """Broken history invariants among stored rows: per key at most one active version, versions that do not
    overlap, an active version ending at TMAX, an inactive one ending before the next start (or at its delete)."""
    problems = []
    by_key: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(tuple(repr(r.get(k)) for k in key), []).append(r)
    for k, versions in by_key.items():
        versions.sort(key=lambda r: canon(r[START], "UTC_DATETIME"))
        starts = [canon(r[START], "UTC_DATETIME") for r in versions]
        ends = [canon(r[END], "UTC_DATETIME") for r in versions]
        if len(set(starts)) != len(starts):
            problems.append(f"{k}: two versions with one start")
        if sum(bool(r[ACTIVE]) for r in versions) > 1:
            problems.append(f"{k}: more than one active version")
        for i, r in enumerate(versions):
            if ends[i] is None or starts[i] is None or ends[i] < starts[i]:
                problems.append(f"{k}: version {starts[i]} ends at {ends[i]}, before it starts")
            if r[ACTIVE] and ends[i] != TMAX:
                problems.append(f"{k}: active version {starts[i]} ends at {ends[i]}, not TMAX")
            if r[ACTIVE] and i != len(versions) - 1:
                problems.append(f"{k}: active version {starts[i]} is not the latest")
            if i + 1 < len(versions) and ends[i] is not None and ends[i] > starts[i + 1] - ONE_MS:
                problems.append(f"{k}: version {starts[i]} ends at {ends[i]}, after the next start {starts[i + 1]} - 1 ms")
            if not r[ACTIVE] and ends[i] == TMAX:
                problems.append(f"{k}: inactive version {starts[i]} ends at TMAX")
    return problems
