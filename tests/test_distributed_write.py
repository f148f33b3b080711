"""Requests through the Spark-side write paths that small requests skip (small_request_bytes 0 here): files decoded by Spark tasks and shuffled to one merge task per bucket, and the first write into an empty
table merged where it is decoded (one task per core, no shuffle). Tester inputs and request sequences must end as
the reference model says and replay exactly from their change files, as on the small-request path."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from destination.on_disk.datafiles import read_data_file
from destination.on_disk.locations import file_dir
from destination.protocol import sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from tests.batchfiles import write_csv
from tests.conftest import spec_of
from tests.rpc_helpers import rows_of, table
from tests.test_change_replay import HISTORY_STEPS, PLAIN_STEPS, VARIANTS, check_replay, run_input, run_steps
from tests.test_write_path import KEY, SYS, create, params, r
from tests.tester_inputs import input_files

pytestmark = pytest.mark.usefixtures("through_spark_tasks")


def _request(configuration, schema, t, tmp_path, files):  # type: ignore[no-untyped-def]
    """A WriteBatch whose replace files are `files` (lists of rows), in that order."""
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name=schema, table=t, file_params=params())
    cols = [c.name for c in t.columns]
    for i, rows in enumerate(files):
        path = write_csv(tmp_path / f"load-{i}.csv.zstd.aes", cols, rows, KEY)
        request.replace_files.append(str(path))
        request.keys[str(path)] = KEY
    return request


def test_first_load_keeps_request_order_for_a_key_in_two_files(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Files are loaded by separate tasks; a key in two of them must still end as the later file says (the
    request goes through the shuffle), and a key repeated inside one file as its last row says."""
    t = table("first", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "load", t)
    request = _request(configuration, "load", t, tmp_path, [
        [r(1, "first file"), r(2, "only here"), r(5, "a"), r(5, "b")],
        [r(3, "second file"), r(1, "second file wins")]])
    assert stub.WriteBatch(request).WhichOneof("response") == "success"
    stored = rows_of(configuration, "load", "first")
    got = {row["id"]: row["v"] for row in stored}
    assert len(got) == len(stored), "a key stored twice"
    assert got == {1: "second file wins", 2: "only here", 3: "second file", 5: "b"}
    assert len(TableStore(open_storage(spec_of(configuration))).load("load", "first").files) <= 16  # type: ignore[union-attr]


def test_first_load_of_distinct_keys_writes_truthful_file_statistics(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("stats", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "load", t)
    files = [[r(i, "x", f"2024-0{1 + f}-01T00:00:{i % 60:02d}Z") for i in range(f * 500, f * 500 + 500)] for f in range(4)]
    assert stub.WriteBatch(_request(configuration, "load", t, tmp_path, files)).WhichOneof("response") == "success"
    store = TableStore(open_storage(spec_of(configuration)))
    current = store.load("load", "stats")
    assert current is not None and current.rows == 2000
    spans = []
    for f in current.files:
        rows = read_data_file(store.storage, file_dir(current.directory, f), f.name)
        synced = rows.column("_fivetran_synced").cast(pa.int64()).to_pylist()
        ids = rows.column("id").to_pylist()
        assert (f.rows, f.min_synced, f.max_synced) == (rows.num_rows, min(synced), max(synced))
        assert ids == sorted(ids) and (f.first_key, f.last_key) == ([ids[0]], [ids[-1]])
        spans.append((ids[0], ids[-1]))
    spans.sort()
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), "files hold non-overlapping key ranges"
    assert sorted(row["id"] for row in rows_of(configuration, "load", "stats")) == list(range(2000))


def test_first_history_load_with_versions_of_a_key_in_two_files(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Versions of one key in two files must meet in one merge and be chained (the request is shuffled)."""
    t = table("h", [("id", "INT", True), ("col1", "STRING"), ("_fivetran_synced", "UTC_DATETIME"),
                    ("_fivetran_start", "UTC_DATETIME", True), ("_fivetran_end", "UTC_DATETIME"),
                    ("_fivetran_active", "BOOLEAN")])
    create(stub, configuration, "hist", t)
    t1, t2, tmax = "2024-01-01T00:00:00Z", "2024-02-01T00:00:00Z", "9999-12-31T23:59:59.999Z"

    def version(i: int, v: str, start: str) -> dict[str, str]:
        return {"id": str(i), "col1": v, "_fivetran_synced": start, "_fivetran_start": start, "_fivetran_end": tmax,
                "_fivetran_active": "true"}
    request = sdk.WriteHistoryBatchRequest(configuration=configuration, schema_name="hist", table=t,
                                           file_params=params())
    cols = [c.name for c in t.columns]
    parts = [("earliest_start_files", ["id", "_fivetran_start"], [{"id": "1", "_fivetran_start": t1},
                                                                  {"id": "2", "_fivetran_start": t1}]),
             ("replace_files", cols, [version(1, "a", t1), version(2, "b", t1)]),
             ("replace_files", cols, [version(1, "a2", t2)])]
    for i, (field, columns, rows) in enumerate(parts):
        path = write_csv(tmp_path / f"h{i}.csv.zstd.aes", columns, rows, KEY)
        getattr(request, field).append(str(path))
        request.keys[str(path)] = KEY
    assert stub.WriteHistoryBatch(request).WhichOneof("response") == "success"
    got = sorted((row["id"], row["col1"], row["_fivetran_active"], row["_fivetran_end"].year)
                 for row in rows_of(configuration, "hist", "h"))
    assert got == [(1, "a", False, 2024), (1, "a2", True, 9999), (2, "b", True, 9999)]


@pytest.mark.parametrize("path", input_files(*(f"clickhouse/{name}.json" for name in (
    "input_all_data_types", "input_history_mode", "input_update_and_hard_delete", "input_soft_truncate_before",
    "input_change_pk", "schema_migrations_input_dml"))), ids=lambda p: p.stem)
def test_tester_inputs_through_spark_tasks(grpc_server, configuration, tmp_path, path: Path) -> None:  # type: ignore[no-untyped-def]
    conf = {**configuration, **VARIANTS["arcion-csv"]}
    run_input(grpc_server, conf, path, tmp_path)  # compares every table with the reference model
    check_replay(conf)


@pytest.mark.parametrize("steps", [PLAIN_STEPS, HISTORY_STEPS], ids=["plain", "history"])
def test_request_sequences_through_spark_tasks(grpc_server, tmp_path: Path, steps: list[dict[str, Any]]) -> None:  # type: ignore[no-untyped-def]
    run_steps(grpc_server, {"root": str(tmp_path / "root"), **VARIANTS["arcion-json"]}, tmp_path, steps)


def test_staged_runs_are_removed_after_the_write_and_after_a_failure(stub, configuration, tmp_path,  # type: ignore[no-untyped-def]
                                                                     server_options) -> None:
    """Large requests stage their sorted operations as runs in the scratch directory (Spark's local mode): none is
    left behind, whether the write committed or a batch file failed to decode in stage 1."""
    scratch = tmp_path / "scratch"
    server_options(scratch_dir=str(scratch), small_request_bytes=0)
    t = table("staged", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "runs", t)
    request = _request(configuration, "runs", t, tmp_path, [[r(i, "x") for i in range(f * 100, f * 100 + 100)]
                                                             for f in range(3)])
    assert stub.WriteBatch(request).WhichOneof("response") == "success"
    assert scratch.exists() and not [p for p in scratch.rglob("*") if p.is_file()], "runs were staged and removed"

    broken = tmp_path / "broken.csv.zstd.aes"
    broken.write_bytes(b"not an encrypted batch file" * 100)
    bad = _request(configuration, "runs", t, tmp_path, [[r(1000, "y")]])
    bad.replace_files.append(str(broken))
    bad.keys[str(broken)] = KEY
    with pytest.raises(grpc.RpcError) as rejected:
        stub.WriteBatch(bad)
    assert "broken.csv.zstd.aes" in rejected.value.details()
    assert not [p for p in scratch.rglob("*") if p.is_file()], "a failed write left staged runs behind"
    assert sorted(x["id"] for x in rows_of(configuration, "runs", "staged")) == list(range(300))
