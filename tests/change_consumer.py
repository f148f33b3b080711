"""A change-file consumer written from the seed (Arcion realtime/snapshot layouts) and output-formats.md (the
Parquet change data feed layout), independent of destination.changes: its own RFC 4180 tokenizer, value parser and
apply rules. It replays a table's change directories from its first version and checks every before image against
the row it holds, so a wrong or missing event fails the replay, not only the final comparison."""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import struct
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from destination.on_disk import layout
from destination.storage.base import Storage

Row = dict[str, Any]


def tokenize(text: str, null_token: str) -> list[list[str | None]]:
    """RFC 4180 rows; an unquoted field equal to the null token is NULL, a quoted one is text."""
    rows: list[list[str | None]] = []
    row: list[str | None] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            j, chunk = i + 1, []
            while True:
                k = text.index('"', j)
                chunk.append(text[j:k])
                if k + 1 < n and text[k + 1] == '"':
                    chunk.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            row.append("".join(chunk))
        else:
            j = i
            while j < n and text[j] not in ",\n":
                j += 1
            raw = text[i:j]
            row.append(None if raw == null_token else raw)
            i = j
        if i >= n or text[i] == "\n":
            rows.append(row)
            row = []
        i += 1
    return rows


def _float32(v: str) -> float:
    return struct.unpack("f", struct.pack("f", float(v)))[0]


PARSERS = {
    "SHORT": int, "INT": int, "LONG": int, "STRING": str, "JSON": str, "XML": str, "BINARY": base64.b64decode,
    "DECIMAL": decimal.Decimal, "FLOAT": _float32, "DOUBLE": float, "BOOLEAN": lambda v: v == "true",
    "UTC_DATETIME": lambda v: dt.datetime.fromisoformat(v.replace("Z", "+00:00")),
    "NAIVE_DATETIME": dt.datetime.fromisoformat, "NAIVE_DATE": dt.date.fromisoformat,
    "NAIVE_TIME": dt.time.fromisoformat,
}


def parse(text: str | None, ftype: str) -> Any:
    return None if text is None else PARSERS[ftype](text)


@dataclass
class Replica:
    """The consumer's copy of one table."""

    columns: list[tuple[str, str]] = field(default_factory=list)  # (name, Fivetran type) in table order
    key: list[str] = field(default_factory=list)
    rows: dict[tuple, Row] = field(default_factory=dict)
    noops_left_out: int = 0
    events: int = 0

    def define(self, definition: dict[str, Any]) -> None:
        self.columns = [(c["name"], c["type"]) for c in definition["columns"]]
        self.key = [c["name"] for c in definition["columns"] if c.get("primary_key")] or \
                   [n for n, _ in self.columns if not n.startswith("_fivetran_")]

    def key_of(self, row: Row) -> tuple:
        return tuple(row[k] for k in self.key)

    def insert(self, after: Row) -> None:
        key = self.key_of(after)
        assert key not in self.rows, f"insert of a key the replica holds: {key}"
        self.rows[key] = after
        self.events += 1

    def update(self, before: Row, after: Row, present: set[str] | None) -> None:
        """`present`: the columns of a minimal New image (None: full images)."""
        key = self.key_of(before)
        assert key in self.rows, f"update of a key the replica lacks: {key}"
        if present is None:
            assert self.rows[key] == before, f"before image differs from the replica's row for {key}"
            self.rows[key] = after
        else:
            self.rows[key] = {**self.rows[key], **{n: after[n] for n in present}}
        self.events += 1

    def delete(self, before: Row, full: bool) -> None:
        key = self.key_of(before)
        assert key in self.rows, f"delete of a key the replica lacks: {key}"
        if full:
            assert self.rows[key] == before, f"before image differs from the replica's row for {key}"
        del self.rows[key]
        self.events += 1


def _parquet(replica: Replica, data: bytes, snapshot: bool) -> None:
    names = [n for n, _ in replica.columns]
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    pre: Row | None = None
    for r in rows:
        image = {n: r[n] for n in names}
        kind = r["_change_type"]
        assert (kind == "snapshot") == snapshot, f"{kind} row in a {'snapshot' if snapshot else 'rows'} directory"
        if kind in ("snapshot", "insert"):
            replica.insert(image)
        elif kind == "update_preimage":
            pre = image
        elif kind == "update_postimage":
            assert pre is not None, "a postimage without its preimage"
            replica.update(pre, image, None)
            pre = None
        else:
            assert kind == "delete", kind
            replica.delete(image, True)


def _triplets(replica: Replica, fields: list[str | None]) -> tuple[str, Row, Row, dict[str, int]]:
    ordered = sorted(replica.columns)  # alphabetical triplets, as the seed's example
    assert len(fields) == 3 * len(ordered) + 3, f"{len(fields)} fields for {len(ordered)} columns"
    types = dict(replica.columns)
    new = {n: parse(fields[3 * i], types[n]) for i, (n, _) in enumerate(ordered)}
    old = {n: parse(fields[3 * i + 1], types[n]) for i, (n, _) in enumerate(ordered)}
    exists = {n: int(fields[3 * i + 2] or "-1") for i, (n, _) in enumerate(ordered)}
    return str(fields[-3]), old, new, exists


def _apply_arcion(replica: Replica, op: str, old: Row, new: Row, exists: dict[str, int]) -> None:
    if op == "I":
        assert all(c == 1 for c in exists.values())
        replica.insert(new)
    elif op == "U":
        full = all(c == 3 for c in exists.values())
        present = None if full else {n for n, c in exists.items() if c & 1}
        replica.update(old, new, present)
    else:
        assert op == "D", op
        replica.delete(old, all(c == 2 for c in exists.values()))


def _csv(replica: Replica, text: str, about: dict[str, Any], snapshot: bool) -> None:
    rows = tokenize(text, about["null_token"])
    if about["include_header"] and rows:
        header = rows.pop(0)
        expected = [n for n, _ in replica.columns] if snapshot else \
            [f"{n}__{p}" for n, _ in sorted(replica.columns) for p in ("new", "old", "exists")] + ["opType", "cursor", "operationcount"]
        assert header == expected, header
    types = dict(replica.columns)
    for fields in rows:
        if snapshot:
            assert len(fields) == len(replica.columns)
            replica.insert({n: parse(v, types[n]) for (n, _), v in zip(replica.columns, fields, strict=True)})
            continue
        op, old, new, exists = _triplets(replica, fields)
        _check_meta(fields[-2], fields[-1])
        _apply_arcion(replica, op, old, new, exists)


def _json(replica: Replica, text: str, snapshot: bool) -> None:
    types = dict(replica.columns)
    for line in text.splitlines():
        obj = json.loads(line)
        if snapshot:
            replica.insert({n: parse(obj[n], types[n]) for n, _ in replica.columns})
            continue
        exists = {n: int(v) for n, v in obj["exists"].items()}
        # an absent value is the string "null" (the seed's style); a NULL that is present is JSON null
        old = {n: parse(obj["before"][n], t) if exists[n] & 2 else None for n, t in replica.columns}
        new = {n: parse(obj["after"][n], t) if exists[n] & 1 else None for n, t in replica.columns}
        assert all(obj["before"][n] == "null" for n in types if not exists[n] & 2)
        _check_meta(obj["cursor"], obj["operationcount"])
        _apply_arcion(replica, obj["opType"], old, new, exists)


def _check_meta(cursor: str | None, operationcount: str | None) -> None:
    c = json.loads(cursor or "")
    assert c["v"] == 2 and {"version", "file", "row", "timestamp", "extractionTimestamp"} <= set(c)
    counts = json.loads(operationcount or "")
    assert set(counts) == {"insertCount", "updateCount", "deleteCount", "replaceCount"}


def replay(storage: Storage, schema: str, table: str) -> Replica:
    """Apply the change directories of versions 1..latest in order. A version is committed when its record is in
    `_log/`, or when it lies before `_log/_pruned.json`'s first record (committed, its record pruned), as
    docs/reference/on-disk-format.md says."""
    prefix = layout.table_prefix(schema, table)
    replica = Replica()
    try:
        first_record = int(json.loads(storage.read_bytes(layout.pruned_log_path(prefix)))["first_record"])
    except FileNotFoundError:
        first_record = 1
    version = 1
    while version < first_record or storage.exists(layout.log_path(prefix, version)):
        directory = layout.changes_dir(prefix, version)
        about = json.loads(storage.read_bytes(f"{directory}/_changes.json"))
        assert about["version"] == version
        snapshot = about["kind"] == "snapshot"
        if snapshot:
            replica.rows.clear()
        replica.define(about["definition"])
        replica.noops_left_out += about["noop_updates_left_out"]
        manifest = json.loads(storage.read_bytes(f"{directory}/_manifest"))
        for entry in manifest["entries"]:
            data = storage.read_bytes(f"{directory}/{entry['url'].rsplit('/', 1)[-1]}")
            assert len(data) == entry["meta"]["content_length"]
            if about["format"] == "parquet":
                _parquet(replica, data, snapshot)
            elif about["format"] == "arcion-csv":
                _csv(replica, data.decode("utf-8"), about, snapshot)
            else:
                _json(replica, data.decode("utf-8"), snapshot)
        version += 1
    return replica
