"""Arcion realtime CSV/JSON formatting (destination/changes/arcion.py): the seed's region examples come out in
its layout, the seed's table hashes are reproduced, and a small Arcion-style consumer written from the seed
(its own RFC 4180 tokenizer that knows quoted from unquoted fields) reads every type back exactly."""
from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa

from destination.changes.arcion import (
    RealtimeRows,
    full_exists,
    java_objects_hash,
    minimal_images,
    realtime_csv,
    realtime_header,
    realtime_json,
    table_name,
)
from destination.model.table_model import ColumnDef
from destination.model.type_mapping import arrow_type
from tests.change_consumer import parse, tokenize

REGION = [ColumnDef("r_regionkey", "INT", True), ColumnDef("r_comment", "STRING"), ColumnDef("r_name", "STRING")]


def image(columns: list[ColumnDef], rows: list[dict[str, Any] | None]) -> pa.Table:
    return pa.table({c.name: pa.array([None if r is None else r.get(c.name) for r in rows], arrow_type(c))
                     for c in columns})


def counts(i: int, u: int, d: int) -> str:
    return json.dumps({"insertCount": i, "updateCount": u, "deleteCount": d, "replaceCount": 0}, separators=(",", ":"))


def region_events() -> RealtimeRows:
    """INSERT (10, 'India', 'India'); UPDATE SET r_comment = 'USA' WHERE r_regionkey = 10; DELETE it."""
    op = pa.array(["I", "U", "D"])
    row = {"r_regionkey": 10, "r_comment": "India", "r_name": "India"}
    before = image(REGION, [None, row, {**row, "r_comment": "USA"}])
    after = image(REGION, [row, {**row, "r_comment": "USA"}, None])
    modified = {"r_comment": pa.array([True, True, False])}
    old, new, exists = minimal_images(op, before, after, modified, ["r_regionkey"])
    cursor = pa.array([json.dumps({"extractorId": 0, "v": 2, "version": 7, "file": "b0000.csv", "row": i}) for i in range(3)])
    return RealtimeRows(op, old, new, exists, cursor, pa.array([counts(6, 0, 0), counts(6, 1, 0), counts(6, 1, 1)]))


def test_seed_region_examples_in_csv() -> None:
    lines = tokenize(realtime_csv(region_events(), REGION).decode(), "NULL")
    # the seed's first 3x+1 fields, alphabetical triplets (r_comment, r_name, r_regionkey)
    assert [f for f in lines[0][:10]] == ["India", None, "1", "India", None, "1", "10", None, "1", "I"]
    assert [f for f in lines[1][:10]] == ["USA", None, "1", None, None, "0", None, "10", "2", "U"]
    assert [f for f in lines[2][:10]] == [None, None, "0", None, None, "0", None, "10", "2", "D"]
    assert [json.loads(line[11])["deleteCount"] for line in lines] == [0, 0, 1]
    assert all(len(line) == 3 * 3 + 3 and json.loads(line[10])["v"] == 2 for line in lines)
    assert realtime_csv(region_events(), REGION, header=True).decode().splitlines()[0] == ",".join(realtime_header(REGION))
    assert ",".join(realtime_header(REGION)).startswith("r_comment__new,r_comment__old,r_comment__exists,r_name__new")


def test_seed_region_examples_in_json() -> None:
    objects = [json.loads(line) for line in realtime_json(region_events(), REGION, "io_blitzz", "region").splitlines()]
    assert objects[0]["tableName"] == {"namespace": {"catalog": None, "schema": "io_blitzz", "hash": 696406511},
                                       "name": "region", "hash": -821029210}
    assert objects[0]["after"] == {"r_regionkey": "10", "r_comment": "India", "r_name": "India"}
    assert objects[0]["before"] == {"r_regionkey": "null", "r_comment": "null", "r_name": "null"}
    assert objects[1]["exists"] == {"r_regionkey": "2", "r_comment": "1", "r_name": "0"}
    assert objects[1]["after"]["r_comment"] == "USA" and objects[1]["before"]["r_regionkey"] == "10"
    assert objects[2]["opType"] == "D" and objects[2]["exists"] == {"r_regionkey": "2", "r_comment": "0", "r_name": "0"}
    assert json.loads(objects[2]["operationcount"]) == {"insertCount": 6, "updateCount": 1, "deleteCount": 1,
                                                         "replaceCount": 0}


def test_seed_table_hashes() -> None:
    assert table_name("io_blitzz", "region")["hash"] == -821029210
    namespace = java_objects_hash("tpch_scale_0_01", "default_schema")
    assert (namespace, java_objects_hash(namespace, "nation")) == (-27122659, -1893420405)


ALL_TYPES = [ColumnDef("id", "INT", True), ColumnDef("s", "STRING"), ColumnDef("b", "BINARY"),
             ColumnDef("d", "DECIMAL", False, 38, 10), ColumnDef("f", "FLOAT"), ColumnDef("x", "DOUBLE"),
             ColumnDef("ts", "UTC_DATETIME"), ColumnDef("nd", "NAIVE_DATETIME"), ColumnDef("day", "NAIVE_DATE"),
             ColumnDef("t", "NAIVE_TIME"), ColumnDef("flag", "BOOLEAN"), ColumnDef("n", "LONG")]
UTC = dt.UTC


def test_a_consumer_replays_full_images_of_every_type_exactly() -> None:
    tricky = [
        {"id": 1, "s": 'a,b "quoted"\nnext line', "b": b"\x00\xff", "d": decimal.Decimal("12345.1234567890"),
         "f": 100.45, "x": 1.2345678901234568e22, "ts": dt.datetime(1, 1, 1, tzinfo=UTC),
         "nd": dt.datetime(2023, 10, 27, 15, 0, 0, 123456), "day": dt.date(9999, 12, 31), "t": dt.time(15, 0),
         "flag": True, "n": -2**63},
        {"id": 2, "s": "NULL", "b": b"", "d": None, "f": None, "x": 0.1,
         "ts": dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), "nd": None, "day": None, "t": None,
         "flag": False, "n": 2**63 - 1},
        {"id": 3, "s": "", "b": None, "d": decimal.Decimal("-0.0000000001"), "f": -0.0, "x": None, "ts": None,
         "nd": None, "day": dt.date(1, 1, 1), "t": dt.time(23, 59, 59, 999999), "flag": None, "n": None},
    ]
    gone = {"id": 4, "s": "x"}
    updated = {**tricky[0], "s": "changed", "flag": False}
    op = pa.array(["I", "I", "I", "I", "U", "D"])
    before = image(ALL_TYPES, [None, None, None, None, tricky[0], gone])
    after = image(ALL_TYPES, [*tricky, gone, updated, None])
    events = RealtimeRows(op, before, after, full_exists(op, [c.name for c in ALL_TYPES]),
                          pa.array(["{}"] * 6), pa.array(["{}"] * 6))
    replica: dict[int, dict[str, Any]] = {}
    names = sorted(c.name for c in ALL_TYPES)
    by_name = {c.name: c for c in ALL_TYPES}
    for fields in tokenize(realtime_csv(events, ALL_TYPES, null_token="NULL").decode(), "NULL"):
        new = {name: parse(fields[3 * i], by_name[name].type) for i, name in enumerate(names)}
        old = {name: parse(fields[3 * i + 1], by_name[name].type) for i, name in enumerate(names)}
        if fields[-3] == "D":
            del replica[old["id"]]
        else:
            if fields[-3] == "U":
                assert replica[old["id"]] == old  # the full before image matches what the consumer holds
            replica[new["id"]] = new
    expected = {r["id"]: r for r in [updated, tricky[1], tricky[2]]}
    for key, row in expected.items():
        for name, value in row.items():
            got = replica[key][name]
            if by_name[name].type == "FLOAT" and value is not None:
                assert got == pa.scalar(value, pa.float32()).as_py(), name
            else:
                assert got == value, name
    assert set(replica) == set(expected)
