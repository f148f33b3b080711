"""The merge's last step, its rows put in key order (spark_jobs.merge.taken_in_order): equal to pyarrow's `take`
whatever the order, stored columns left uncopied only where the change wrote the very values they hold (floats bit
for bit, NULLs in place); and whole merges of updates, replaces and deletes against a model written apart."""
from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from destination.model.keys import bisected, key_tokens, matched_keys
from destination.model.table_model import ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema
from spark_jobs.merge import key_columns, merge_rows, same_values, taken_in_order
from spark_jobs.operations import CHANGES, KEY, OP, OP_DELETE, OP_REPLACE, OP_UPDATE, SEQ, UNMOD

TABLE = TableDef("t", (ColumnDef("id", "LONG", True), ColumnDef("name", "STRING"), ColumnDef("score", "DOUBLE"),
                       ColumnDef("n", "INT")))


def _rows(ids: list[int], names: list[str | None], scores: list[float | None]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string()),
                     "score": pa.array(scores, pa.float64())})


def _stored_and_appended(appended: pa.Table) -> tuple[pa.Table, pa.ChunkedArray]:
    stored = _rows([1, 2, 3, 4], ["a", "b", None, "d"], [0.0, 1.5, math.nan, None])
    rows = pa.concat_tables([stored, appended])
    return rows, rows.column("id").cast(pa.string())


def _check(rows: pa.Table, keys: pa.ChunkedArray, order: list[int]) -> pa.Table:
    table, taken_keys = taken_in_order(rows, keys, np.array(order), 4)
    expected = rows.take(pa.array(order))  # the oracle: pyarrow's take
    assert table.schema == expected.schema
    assert [_comparable(tuple(r.values())) for r in table.to_pylist()] == \
        [_comparable(tuple(r.values())) for r in expected.to_pylist()]
    assert taken_keys.equals(keys.take(pa.array(order)))
    return table


def _same_buffer(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    return a.chunk(0).buffers()[1].address == b.chunk(0).buffers()[1].address


def test_an_update_in_place_leaves_the_columns_it_did_not_change_uncopied() -> None:
    rows, keys = _stored_and_appended(_rows([2], ["b2"], [1.5]))  # row 2 updated: its name changes, its score not
    table = _check(rows, keys, [0, 4, 2, 3])
    assert _same_buffer(table.column("score"), rows.column("score"))  # the stored column itself
    assert _same_buffer(table.column("id"), rows.column("id"))
    assert not _same_buffer(table.column("name"), rows.column("name"))
    assert table.column("name").to_pylist() == ["a", "b2", None, "d"]


@pytest.mark.parametrize("old_row, new", [
    (0, -0.0),  # equal under ==, another value bit for bit
    (2, 0.0),  # NaN replaced: NaN != NaN, the value changes
    (3, 0.0),  # a NULL replaced by a value
    (1, None),  # a value replaced by NULL
])
def test_values_that_compare_equal_but_differ_are_taken(old_row: int, new: float | None) -> None:
    ids = [1, 2, 3, 4]
    names = ["a", "b", None, "d"]
    rows, keys = _stored_and_appended(_rows([ids[old_row]], [names[old_row]], [new]))
    order = [4 if i == old_row else i for i in range(4)]
    table = _check(rows, keys, order)
    assert _same_buffer(table.column("name"), rows.column("name"))  # the name is the stored one's: not copied


def test_a_nan_written_again_keeps_the_stored_column() -> None:
    rows, keys = _stored_and_appended(_rows([3], [None], [math.nan]))
    table = _check(rows, keys, [0, 1, 4, 3])
    assert _same_buffer(table.column("score"), rows.column("score"))


def test_another_key_in_a_dead_rows_place_is_taken() -> None:
    """Row 2 deleted and a new key inserted between 1 and 3 (2.5 cannot be a LONG, so the test places key 9 there
    by order alone): the same shape as an update in place, but the key and values differ."""
    rows, keys = _stored_and_appended(_rows([9], ["b"], [1.5]))
    table = _check(rows, keys, [0, 4, 2, 3])
    assert table.column("id").to_pylist() == [1, 9, 3, 4]


@pytest.mark.parametrize("order", [[0, 2, 3], [0, 1, 4, 2, 3], [1, 0, 2, 3], [0, 1, 2, 3, 4]])
def test_inserts_deletes_and_moves_are_taken_whole(order: list[int]) -> None:
    rows, keys = _stored_and_appended(_rows([5], ["e"], [2.0]))
    _check(rows, keys, order)


def test_same_values_on_every_stored_type() -> None:
    for a, b, same in [
        (pa.array([1, None], pa.int64()), pa.array([1, None], pa.int64()), True),
        (pa.array([1, None], pa.int64()), pa.array([None, 1], pa.int64()), False),
        (pa.array([b"x", b""]), pa.array([b"x", None]), False),
        (pa.array([0.0], pa.float32()), pa.array([-0.0], pa.float32()), False),
        (pa.array([math.nan], pa.float32()), pa.array([math.nan], pa.float32()), True),
        (pa.array([None, None], pa.string()), pa.array([None, None], pa.string()), True),
        (pa.array(["é"]), pa.array(["e"]), False),
    ]:
        assert same_values(a, b) is same, (a, b)


# ---- whole merges against a model -----------------------------------------------------------------------------

def _model(stored: dict[Any, dict[str, Any]], requests: list[tuple[int, dict[str, Any], set[str]]]) -> list[tuple[Any, ...]]:
    """Fivetran's semantics written apart: a replace writes the row, an update writes its modified columns of an
    existing row, a delete removes it; in request order."""
    rows = {k: dict(v) for k, v in stored.items()}
    for op, values, unmodified in requests:
        key = values["id"]
        if op == OP_REPLACE:
            rows[key] = dict(values)
        elif op == OP_UPDATE and key in rows:
            rows[key].update({c: v for c, v in values.items() if c not in unmodified})
        elif op == OP_DELETE:
            rows.pop(key, None)
    return sorted((r["id"], r["name"], r["score"], r["n"]) for r in rows.values())


def _table(key_type: str) -> TableDef:
    return TableDef("t", (ColumnDef("id", key_type, True), *TABLE.columns[1:]))


def _operations(requests: list[tuple[int, dict[str, Any], set[str]]], table: TableDef) -> pa.Table:
    rows = pa.Table.from_pylist([r[1] for r in requests], schema=arrow_schema(table.columns, with_meta=False))
    rows = rows.append_column(OP, pa.array([r[0] for r in requests], pa.int8()))
    rows = rows.append_column(SEQ, pa.array(np.arange(len(requests)), pa.int64()))
    rows = rows.append_column(CHANGES, pa.nulls(len(requests), pa.string()))
    for c in table.columns:
        rows = rows.append_column(UNMOD + c.name, pa.array([c.name in r[2] for r in requests]))
    return rows.append_column(KEY, key_tokens(rows, key_columns(table)))


@pytest.mark.parametrize("key_type", ["LONG", "INT", "STRING"])  # integers matched as themselves, text by token
@pytest.mark.parametrize("seed", range(6))
def test_merges_of_updates_replaces_and_deletes_match_the_model(seed: int, key_type: str) -> None:
    rng = random.Random(seed)
    table_def = _table(key_type)
    key: Any = (lambda k: f"k{k:04d}") if key_type == "STRING" else (lambda k: k)
    scores = [0.0, -0.0, math.nan, None, 1.25]
    stored = {key(k): {"id": key(k), "name": rng.choice(["a", "b", None]), "score": rng.choice(scores),
                       "n": rng.randrange(3)} for k in range(0, 400, 2)}
    requests: list[tuple[int, dict[str, Any], set[str]]] = []
    for _ in range(60):
        k = key(rng.randrange(0, 420)) if seed % 2 else rng.choice(list(stored))  # odd seeds insert new keys too
        op = rng.choice([OP_REPLACE, OP_UPDATE, OP_UPDATE, OP_DELETE])
        values = {"id": k, "name": rng.choice(["a", "c", None]), "score": rng.choice(scores), "n": rng.randrange(3)}
        unmodified = {c for c in ("name", "score", "n") if rng.random() < 0.5} if op == OP_UPDATE else set()
        requests.append((op, values, unmodified))
    table = pa.Table.from_pylist([{**r, "_destination_meta": json.dumps({"version": 1})} for r in stored.values()],
                                 schema=arrow_schema(table_def.columns))
    result = merge_rows(table, _operations(requests, table_def), table_def, version=2).table
    got = sorted((r["id"], r["name"], r["score"], r["n"]) for r in result.to_pylist())
    want = _model(stored, requests)
    assert [_comparable(r) for r in got] == [_comparable(r) for r in want]
    assert result.column("id").to_pylist() == sorted(result.column("id").to_pylist())  # in key order


@pytest.mark.parametrize("key_type", ["LONG", "STRING"])
def test_deletes_and_updates_of_absent_keys_alone_match_the_model(key_type: str) -> None:
    """A change that appends no row (the stored rows stay in their order; the dead ones are filtered out)."""
    rng = random.Random(7)
    table_def = _table(key_type)
    key: Any = (lambda k: f"k{k:04d}") if key_type == "STRING" else (lambda k: k)
    stored = {key(k): {"id": key(k), "name": rng.choice(["a", "b", None]), "score": rng.choice([0.0, -0.0, math.nan]),
                       "n": rng.randrange(3)} for k in range(0, 400, 2)}
    requests: list[tuple[int, dict[str, Any], set[str]]] = []
    for k in rng.sample(range(0, 420), 80):
        op = OP_DELETE if k % 2 == 0 or k > 400 else OP_UPDATE  # updates of odd keys: none is stored
        requests.append((op, {"id": key(k), "name": "z", "score": 1.0, "n": 9}, set()))
    table = pa.Table.from_pylist([{**r, "_destination_meta": json.dumps({"version": 1})} for r in stored.values()],
                                 schema=arrow_schema(table_def.columns))
    result = merge_rows(table, _operations(requests, table_def), table_def, version=2)
    got = [(r["id"], r["name"], r["score"], r["n"]) for r in result.table.to_pylist()]
    assert [_comparable(r) for r in got] == [_comparable(r) for r in _model(stored, requests)]  # in key order too
    assert result.counts.deleted == sum(1 for op, v, _ in requests if op == OP_DELETE and v["id"] in stored) > 0
    assert result.counts.ignored == sum(1 for op, v, _ in requests if v["id"] not in stored) > 0


@pytest.mark.parametrize("updated", [0, 5, 9])  # the least, a middle and the greatest key
def test_an_update_of_one_key_leaves_the_stored_columns_it_did_not_change_uncopied(updated: int) -> None:
    """Wherever the key lies: the greatest key's new row, appended after its dead one, is already in key order, and
    must not send the merge down the path that copies every column."""
    stored = {k: {"id": k, "name": "a", "score": float(k), "n": 1} for k in range(10)}
    table = pa.Table.from_pylist([{**r, "_destination_meta": json.dumps({"version": 1})} for r in stored.values()],
                                 schema=arrow_schema(TABLE.columns))
    requests = [(OP_UPDATE, {"id": updated, "name": "b", "score": 0.0, "n": 0}, {"score", "n"})]
    result = merge_rows(table, _operations(requests, TABLE), TABLE, version=2).table
    assert [(r["id"], r["name"], r["score"], r["n"]) for r in result.to_pylist()] == _model(stored, requests)
    for name in ("score", "n"):  # the columns the update left unmodified: the stored columns themselves
        assert _same_buffer(result.column(name), table.column(name)), name
    assert result.column("name").to_pylist()[updated] == "b"


def _comparable(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """NaN made comparable and -0.0 told from 0.0."""
    return tuple(("nan",) if isinstance(v, float) and math.isnan(v) else (v, math.copysign(1, v))
                 if isinstance(v, float) else v for v in row)


# ---- the keys merges match on ------------------------------------------------------------------------------------

def test_integer_keys_match_as_their_tokens_do() -> None:
    rng = np.random.default_rng(5)
    long_key, int_key = [ColumnDef("id", "LONG", True)], [ColumnDef("id", "INT", True)]
    stored = pa.table({"id": pa.array(rng.integers(-2**40, 2**40, 500), pa.int64())})
    probe = pa.table({"id": pa.concat_arrays([stored.column("id").chunk(0).slice(0, 50),
                                              pa.array(rng.integers(-2**40, 2**40, 50), pa.int64())])})
    probe_tokens = key_tokens(probe, long_key)
    stored_keys, probe_keys = matched_keys(stored, probe, probe_tokens, long_key)
    assert stored_keys.type == probe_keys.type == pa.int64()  # the integers themselves
    by_integers = pc.is_in(probe_keys, value_set=stored_keys)
    by_tokens = pc.is_in(probe_tokens, value_set=key_tokens(stored, long_key))  # the oracle
    assert by_integers.equals(by_tokens) and pc.sum(by_integers).as_py() >= 50
    narrow = matched_keys(pa.table({"id": pa.array([1, 2], pa.int32())}), pa.table({"id": pa.array([2, 3], pa.int64())}),
                          pa.array(["2", "3"]), int_key)  # widths differ: int64 both
    assert [a.type for a in narrow] == [pa.int64(), pa.int64()]

    def by_tokens_given(stored: pa.Table, operations: pa.Table, key: list[ColumnDef]) -> bool:
        tokens = key_tokens(operations, key)
        found = matched_keys(stored, operations, tokens, key)
        return found[0].equals(key_tokens(stored, key)) and found[1] is tokens  # the tokens given, not made again

    with_null = pa.table({"id": pa.array([1, None], pa.int64())})
    assert by_tokens_given(stored, with_null, long_key)  # NULL keys match as tokens do (NULL_TOKEN)
    text = [ColumnDef("id", "STRING", True)]
    assert by_tokens_given(pa.table({"id": ["1", "2"]}), pa.table({"id": ["1"]}), text)
    pair = [ColumnDef("a", "INT", True), ColumnDef("b", "INT", True)]
    assert by_tokens_given(pa.table({"a": [1], "b": [2]}), pa.table({"a": [1], "b": [3]}), pair)


@pytest.mark.parametrize("seed", range(5))
def test_keys_found_by_bisection_are_the_keys_found_by_hashing(seed: int) -> None:
    rng = np.random.default_rng(seed)
    stored = pa.array(np.sort(rng.choice(np.arange(-5_000, 5_000), 700, replace=False)), pa.int64())
    wanted = pa.array(rng.integers(-5_200, 5_200, 300), pa.int64())  # some stored, some not, some past either end
    at, present = bisected(stored, wanted)  # type: ignore[misc]
    assert present.tolist() == pc.is_in(wanted, value_set=stored).to_pylist()  # the oracle: pyarrow's hashing
    assert at[present].tolist() == pc.index_in(wanted, value_set=stored).drop_null().to_pylist()
    assert present.any() and not present.all()


@pytest.mark.parametrize("stored, wanted", [
    (pa.array([3, 1, 2], pa.int64()), pa.array([1], pa.int64())),  # not in order: hashed
    (pa.array([1, 1, 2], pa.int64()), pa.array([1], pa.int64())),  # a key twice: hashed
    (pa.array([1, None], pa.int64()), pa.array([1], pa.int64())),
    (pa.array(["1", "2"]), pa.array(["1"])),  # key tokens
    (pa.array([], pa.int64()), pa.array([1], pa.int64())),
])
def test_keys_not_bisected(stored: pa.Array, wanted: pa.Array) -> None:
    assert bisected(stored, wanted) is None


def test_a_merge_of_keys_in_order_finds_the_rows_hashing_finds() -> None:
    """The merge's first round bisects a range's stored integer keys when they are in order; unordered stored rows
    (not a data file's) are hashed. Both against the model."""
    rng = random.Random(3)
    stored = {k: {"id": k, "name": "a", "score": 1.0, "n": 1} for k in range(0, 3000, 3)}
    requests: list[tuple[int, dict[str, Any], set[str]]] = []
    for k in rng.sample(range(-10, 3010), 400):
        op = rng.choice([OP_UPDATE, OP_DELETE, OP_REPLACE])
        requests.append((op, {"id": k, "name": "b", "score": 2.0, "n": 2}, {"n"} if op == OP_UPDATE else set()))
    rows = [{**r, "_destination_meta": json.dumps({"version": 1})} for r in stored.values()]
    for order in (rows, list(reversed(rows))):
        table = pa.Table.from_pylist(order, schema=arrow_schema(TABLE.columns))
        result = merge_rows(table, _operations(requests, TABLE), TABLE, version=2).table
        got = [(r["id"], r["name"], r["score"], r["n"]) for r in result.to_pylist()]
        assert [_comparable(r) for r in got] == [_comparable(r) for r in _model(stored, requests)]
