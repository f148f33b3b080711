"""The Spark write path through WriteBatch: ordering rules, key comparison, retries, and cost that follows
the change (from the versions' file statistics)."""
from __future__ import annotations

import gzip
import io
import itertools
import random
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest

from destination.model.table_model import TableDef
from destination.protocol import sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING, csv_bytes, seal
from destination.write import sorted_runs
from destination.write.one_step import commit_one_step
from tests.batchfiles import seal_raw, write_csv
from tests.conftest import spec_of
from tests.rpc_helpers import rows_of, table

KEY = bytes(range(32))
U = UNMODIFIED_STRING
SYS = [("_fivetran_synced", "UTC_DATETIME"), ("_fivetran_deleted", "BOOLEAN")]


def params() -> sdk.FileParams:
    return sdk.FileParams(compression=sdk.Compression.Value("ZSTD"), encryption=sdk.Encryption.Value("AES"),
                          null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)


def write(stub, configuration, schema, t, tmp_path, replace=(), update=(), delete=()):  # type: ignore[no-untyped-def]
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name=schema, table=t, file_params=params())
    cols = [c.name for c in t.columns]
    for kind, rows in (("replace", replace), ("update", update), ("delete", delete)):
        if rows:
            path = write_csv(tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}.csv.zstd.aes", cols, list(rows), KEY)
            getattr(request, f"{kind}_files").append(str(path))
            request.keys[str(path)] = KEY
    answer = stub.WriteBatch(request)
    assert answer.WhichOneof("response") == "success", answer
    return request


def create(stub, configuration, schema, t):  # type: ignore[no-untyped-def]
    assert stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name=schema, table=t)).success


def r(i: Any, v: Any, ts: str = "2024-01-01T00:00:00Z", **extra: Any) -> dict[str, Any]:
    return {"id": str(i), "v": v, "n": extra.get("n", U if v == U else "1"), "_fivetran_synced": ts,
            "_fivetran_deleted": extra.get("deleted", "false")}


def test_request_order_and_repeated_keys(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("t", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "w", t)
    write(stub, configuration, "w", t, tmp_path, replace=[r(1, "a"), r(2, "b"), r(3, "c")])
    write(stub, configuration, "w", t, tmp_path,
          replace=[r(4, "first"), r(4, "second"), r(5, "new")],
          update=[{**r(1, "upd"), "n": U},  # partial update: n unmodified
                  {**r(1, U), "n": "7"},  # a second partial update of the same key: both apply
                  {**r(4, "after-replace"), "n": U},  # an update sees the earlier replace of this request
                  r(99, "missing"),  # update of a missing key: nothing
                  {**r(2, U, deleted="true"), "n": U}],  # soft delete
          delete=[{"id": "3", "v": None, "n": None, "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": None},
                  {"id": "98", "v": None, "n": None, "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": None}])
    got = {row["id"]: row for row in rows_of(configuration, "w", "t")}
    assert sorted(got) == [1, 2, 4, 5]
    assert (got[1]["v"], got[1]["n"]) == ("upd", 7)
    assert (got[2]["v"], got[2]["n"], got[2]["_fivetran_deleted"]) == ("b", 1, True)
    assert (got[4]["v"], got[4]["n"]) == ("after-replace", 1)
    assert got[5]["v"] == "new"


def test_replace_with_missing_columns_keeps_stored_values(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("t", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "m", t)
    write(stub, configuration, "m", t, tmp_path, replace=[r(1, "a"), r(2, "b")])
    narrow = table("t", [("id", "INT", True), ("v", "STRING"), *SYS])  # the file lacks `n`
    rows = [{k: v for k, v in r(1, "a2").items() if k != "n"}, {k: v for k, v in r(3, "c").items() if k != "n"}]
    write(stub, configuration, "m", narrow, tmp_path, replace=rows)
    got = {row["id"]: row for row in rows_of(configuration, "m", "t")}
    assert (got[1]["v"], got[1]["n"]) == ("a2", 1) and (got[3]["v"], got[3]["n"]) == ("c", None)


def test_keyless_table_by_fivetran_id(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("k", [("v", "STRING"), ("_fivetran_synced", "UTC_DATETIME"), ("_fivetran_id", "STRING", True),
                    ("_fivetran_deleted", "BOOLEAN")])
    create(stub, configuration, "k", t)
    row = lambda fid, v: {"v": v, "_fivetran_id": fid, "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}  # noqa: E731
    write(stub, configuration, "k", t, tmp_path, replace=[row("a", "1"), row("b", "2"), row("a", "3")])
    write(stub, configuration, "k", t, tmp_path, delete=[{"v": None, "_fivetran_id": "b", "_fivetran_synced": "2024-01-01T00:00:00Z",
                                                           "_fivetran_deleted": None}])
    assert [(x["_fivetran_id"], x["v"]) for x in rows_of(configuration, "k", "k")] == [("a", "3")]


def test_composite_keys_compare_in_their_types(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("c", [("f", "FLOAT", True), ("d", "DECIMAL", True, (38, 10)), ("b", "BOOLEAN", True), ("dt", "NAIVE_DATE", True),
                    ("ts", "UTC_DATETIME", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "c", t)
    base = {"_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}
    write(stub, configuration, "c", t, tmp_path, replace=[
        {"f": "1.1", "d": "1.5", "b": "true", "dt": "0001-01-01", "ts": "2024-01-01T00:00:00.000001Z", "v": "x", **base}])
    # same key written differently: 1.1 as float32 text, 1.50 with another scale, the same instant with more digits
    write(stub, configuration, "c", t, tmp_path, update=[
        {"f": "1.100000023841858", "d": "1.50", "b": "true", "dt": "0001-01-01", "ts": "2024-01-01T00:00:00.000001000Z",
         "v": "y", **base}])
    write(stub, configuration, "c", t, tmp_path, update=[  # a different microsecond is a different key
        {"f": "1.1", "d": "1.5", "b": "true", "dt": "0001-01-01", "ts": "2024-01-01T00:00:00.000002Z", "v": "z", **base}])
    assert [x["v"] for x in rows_of(configuration, "c", "c")] == ["y"]


def test_edge_values_round_trip(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("e", [("id", "INT", True), ("d", "DECIMAL", False, (38, 10)), ("f", "FLOAT"), ("db", "DOUBLE"),
                    ("s", "STRING"), ("day", "NAIVE_DATE"), *SYS])
    create(stub, configuration, "e", t)
    base = {"_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}
    write(stub, configuration, "e", t, tmp_path, replace=[
        {"id": "1", "d": "1234567890123456789012345678.0123456789", "f": "NaN", "db": "Infinity", "s": "", "day": "0001-01-01", **base},
        {"id": "2", "d": "-0.0000000001", "f": "-Infinity", "db": "-1.7976931348623157E308", "s": None, "day": "9999-12-31", **base},
        {"id": "3", "d": None, "f": "3.4028235E38", "db": "4.9E-324", "s": NULL_STRING + "!", "day": None, **base}])
    got = {x["id"]: x for x in rows_of(configuration, "e", "e")}
    import datetime as dt
    import decimal
    import math

    assert got[1]["d"] == decimal.Decimal("1234567890123456789012345678.0123456789") and math.isnan(got[1]["f"])
    assert got[1]["db"] == math.inf and got[1]["s"] == "" and got[1]["day"] == dt.date(1, 1, 1)
    assert got[2]["d"] == decimal.Decimal("-0.0000000001") and got[2]["f"] == -math.inf and got[2]["s"] is None
    assert got[2]["db"] == -1.7976931348623157e308 and got[2]["day"] == dt.date(9999, 12, 31)
    assert got[3]["s"] == NULL_STRING + "!" and got[3]["db"] == 5e-324


def test_a_retried_request_applies_once(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("r", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "r", t)
    write(stub, configuration, "r", t, tmp_path, replace=[r(1, "a")])
    request = write(stub, configuration, "r", t, tmp_path, replace=[r(2, "b")], update=[{**r(1, "a2"), "n": U}])
    store = TableStore(open_storage(spec_of(configuration)))
    before = store.load("r", "r")
    again = stub.WriteBatch(request)  # Fivetran did not see the answer and sends the same files again
    assert again.WhichOneof("response") == "success"
    after = store.load("r", "r")
    assert before is not None and after is not None and after.version == before.version
    assert sorted((x["id"], x["v"]) for x in rows_of(configuration, "r", "r")) == [(1, "a2"), (2, "b")]


def test_retries_are_recognised_among_the_last_20_batches(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The last 20 batches' digests are kept: a retry of the 20th-latest is recognised, of the 21st-latest is not."""
    t = table("d", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "dig", t)
    requests = [write(stub, configuration, "dig", t, tmp_path, replace=[r(i, f"v{i}")]) for i in range(22)]
    store = TableStore(open_storage(spec_of(configuration)))
    latest = 1 + len(requests)  # CreateTable, then one version per request

    def retry(request: sdk.WriteBatchRequest) -> int:
        assert stub.WriteBatch(request).WhichOneof("response") == "success"
        current = store.load("dig", "d")
        assert current is not None
        return current.version

    assert retry(requests[-20]) == latest  # among the last 20: answered without a new version
    assert retry(requests[-21]) == latest + 1  # forgotten: applied again (a replace, so the rows stay the same)
    assert sorted((x["id"], x["v"]) for x in rows_of(configuration, "dig", "d")) == [(i, f"v{i}") for i in range(22)]


@pytest.mark.parametrize("compression,encrypted", [("GZIP", True), ("GZIP", False), ("OFF", True), ("OFF", False)])
def test_gzip_and_uncompressed_batch_files(stub, configuration, tmp_path, compression: str, encrypted: bool) -> None:  # type: ignore[no-untyped-def]
    t = table("z", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    schema = f"c{compression.lower()}{int(encrypted)}"
    create(stub, configuration, schema, t)
    rows = [r(1, "one"), r(2, None), r(3, "three, with a comma")]
    plain = csv_bytes([c.name for c in t.columns], rows, random.Random(3))
    body = gzip.compress(plain) if compression == "GZIP" else plain
    path = tmp_path / f"batch.csv{'.gz' if compression == 'GZIP' else ''}{'.aes' if encrypted else ''}"
    path.write_bytes(seal_raw(body, KEY) if encrypted else body)
    file_params = sdk.FileParams(compression=sdk.Compression.Value(compression),
                                 encryption=sdk.Encryption.Value("AES" if encrypted else "NONE"),
                                 null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name=schema, table=t, file_params=file_params,
                                    replace_files=[str(path)], keys={str(path): KEY} if encrypted else {})
    assert stub.WriteBatch(request).WhichOneof("response") == "success"
    got = sorted((x["id"], x["v"], x["n"]) for x in rows_of(configuration, schema, "z"))
    assert got == [(1, "one", 1), (2, None, 1), (3, "three, with a comma", 1)]


def _big_csv(path: Path, ids: np.ndarray, value: str) -> Path:
    """`v` is `value` and a random number: values that do not compress away, so the table's files are of the
    size a real table's would be (a constant column made every file a fraction of the target: small files, which
    compaction folds into their neighbours whenever a request touches one of them)."""
    n = len(ids)
    noise = pa.array(np.random.default_rng(len(ids)).integers(0, 2**62, n)).cast(pa.string())
    tbl = pa.table({"id": pa.array(ids), "v": pc.binary_join_element_wise(value, noise, " "),
                    "_fivetran_synced": pa.array(np.full(n, "2024-01-01T00:00:00Z")),
                    "_fivetran_deleted": pa.array(np.full(n, "false"))})
    buf = io.BytesIO()
    pacsv.write_csv(tbl, buf)
    path.write_bytes(seal(buf.getvalue(), KEY))
    return path


# which files a change rewrites is the planner's choice, the same on either backend: local only (on S3, compaction is
# test_many_small_syncs_are_compacted_into_files_near_the_target's s3 case)
@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_cost_follows_a_clustered_change_on_a_million_rows(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Keys that grow: appending new keys rewrites no file, and updating or deleting recent keys rewrites only the
    files holding them; the files stay sorted, non-overlapping ranges of about the target size."""
    configuration = {**configuration, "target_file_size": "512KiB"}
    t = table("big", [("id", "LONG", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "cost", t)

    def send(**files: Path) -> None:
        request = sdk.WriteBatchRequest(configuration=configuration, schema_name="cost", table=t, file_params=params())
        for kind, path in files.items():
            getattr(request, f"{kind}_files").append(str(path))
            request.keys[str(path)] = KEY
        assert stub.WriteBatch(request).WhichOneof("response") == "success"

    send(replace=_big_csv(tmp_path / "load.csv.zstd.aes", np.arange(1_000_000), "initial"))
    store = TableStore(open_storage(spec_of(configuration)))
    loaded = store.load("cost", "big")
    assert loaded is not None and loaded.rows == 1_000_000
    assert len(loaded.files) >= 8, "a million rows at a 512 KiB target are several files"
    assert all(f.bytes < 2 * 512 * 1024 for f in loaded.files)
    _assert_ranges_apart(loaded.files)
    names = {f.name for f in loaded.files}

    send(replace=_big_csv(tmp_path / "new.csv.zstd.aes", np.arange(1_000_000, 1_010_000), "new"))
    added = store.load("cost", "big")
    assert added is not None and added.rows == 1_010_000
    assert names <= {f.name for f in added.files}, "appending new keys rewrote existing data files"
    _assert_ranges_apart(added.files)

    # recent keys: only the files holding them are rewritten, a small part of the table's bytes
    recent = np.arange(990_000, 1_005_000, 15)
    send(update=_big_csv(tmp_path / "upd.csv.zstd.aes", recent, "updated"),
         delete=_big_csv(tmp_path / "del.csv.zstd.aes", recent[:10] + 1, "gone"))
    updated = store.load("cost", "big")
    assert updated is not None and updated.rows == 1_010_000 - 10
    rewritten = [f for f in added.files if f.name not in {g.name for g in updated.files}]
    assert rewritten and sum(f.bytes for f in rewritten) <= 0.1 * sum(f.bytes for f in added.files)
    assert all(f.last_key is not None and f.last_key[0] >= 990_000 for f in rewritten)
    _assert_ranges_apart(updated.files)
    got = rows_of(configuration, "cost", "big", validate=True)
    assert sorted(x["id"] for x in got if x["v"].startswith("updated ")) == sorted(recent.tolist())
    assert not {x["id"] for x in got} & set((recent[:10] + 1).tolist())


def test_a_file_cut_between_units_gives_each_unit_its_part(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Many new keys inside one stored file's range: the write cuts the file between several units and each
    rewrites only its part of the stored rows (a unit that took the whole file would write its rows twice)."""
    configuration = {**configuration, "target_file_size": "512KiB"}
    t = table("cut", [("id", "LONG", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "cost", t)

    def send(path: Path) -> None:
        request = sdk.WriteBatchRequest(configuration=configuration, schema_name="cost", table=t, file_params=params(),
                                        replace_files=[str(path)], keys={str(path): KEY})
        assert stub.WriteBatch(request).WhichOneof("response") == "success"

    stored = np.arange(0, 1_000_000, 1000)
    send(_big_csv(tmp_path / "load.csv.zstd.aes", stored, "stored"))
    store = TableStore(open_storage(spec_of(configuration)))
    loaded = store.load("cost", "cut")
    assert loaded is not None and len(loaded.files) == 1
    new = np.setdiff1d(np.arange(1, 999_000, 7), stored)
    send(_big_csv(tmp_path / "new.csv.zstd.aes", new, "new"))
    after = store.load("cost", "cut")
    assert after is not None and len(after.files) >= 4, "the new keys are several files' worth: units cut the file"
    _assert_ranges_apart(after.files)
    ids = [x["id"] for x in rows_of(configuration, "cost", "cut", validate=True)]
    assert sorted(ids) == sorted([*stored.tolist(), *new.tolist()])  # every key once


def _assert_ranges_apart(files) -> None:  # type: ignore[no-untyped-def]
    """Every file's first key ≤ its last key < the next file's first key (a LONG key)."""
    spans = sorted((f.first_key[0], f.last_key[0]) for f in files if f.rows)
    assert all(lo <= hi for lo, hi in spans)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans


def test_truncate_drops_and_keeps_whole_files_by_their_statistics(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from google.protobuf.timestamp_pb2 import Timestamp

    t = table("tr", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "trs", t)
    write(stub, configuration, "trs", t, tmp_path, replace=[r(i, "old", "2024-01-01T00:00:00Z") for i in range(40)])
    store = TableStore(open_storage(spec_of(configuration)))
    old_files = {f.name for f in store.load("trs", "tr").files}  # type: ignore[union-attr]
    write(stub, configuration, "trs", t, tmp_path, replace=[r(i, "new", "2024-06-01T00:00:00Z") for i in range(100, 140)])
    before = store.load("trs", "tr")
    assert before is not None
    new_files = {f.name for f in before.files} - old_files
    cutoff = Timestamp(seconds=1_709_251_200)  # 2024-03-01: between the two writes
    assert stub.Truncate(sdk.TruncateRequest(configuration=configuration, schema_name="trs", table_name="tr",
                                             synced_column="_fivetran_synced", utc_delete_before=cutoff)).success
    after = store.load("trs", "tr")
    assert after is not None
    # the old files were dropped unread and the new ones carried as they were: no file was rewritten
    assert {f.name for f in after.files} == new_files
    assert sorted(x["id"] for x in rows_of(configuration, "trs", "tr")) == list(range(100, 140))


def test_truncate_compares_exact_milliseconds_far_from_1970(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Year-9999 stamps do not fit a float64 in µs, and instants before 1970 must floor, not round toward zero."""
    from google.protobuf.timestamp_pb2 import Timestamp

    t = table("far", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "far", t)
    write(stub, configuration, "far", t, tmp_path, replace=[
        r(1, "pre-epoch", "1969-12-31T23:59:59.999500Z"),  # at ms precision: 23:59:59.999, before the cutoff
        r(2, "epoch", "1970-01-01T00:00:00.000500Z"),  # 00:00:00.000: not strictly before
        r(3, "far future", "9999-12-31T23:59:59.999999Z")])
    cutoff = Timestamp(seconds=0)
    soft = sdk.TruncateRequest(configuration=configuration, schema_name="far", table_name="far",
                               synced_column="_fivetran_synced", utc_delete_before=cutoff)
    soft.soft.deleted_column = "_fivetran_deleted"
    assert stub.Truncate(soft).success
    assert {x["id"]: x["_fivetran_deleted"] for x in rows_of(configuration, "far", "far")} == {1: True, 2: False, 3: False}
    hard = sdk.TruncateRequest(configuration=configuration, schema_name="far", table_name="far",
                               synced_column="_fivetran_synced", utc_delete_before=cutoff)
    assert stub.Truncate(hard).success
    assert sorted(x["id"] for x in rows_of(configuration, "far", "far")) == [2, 3]




def _legacy_table(configuration, t, rows_per_bucket):  # type: ignore[no-untyped-def]
    """A table as versions before key ranges wrote it: placement by 16 key-hash buckets (no placement field in
    `_table.json`), each bucket's file holding keys from all over the key space, in no order."""
    import json

    from destination.model.table_model import HASH_BUCKETS
    from destination.on_disk import records
    from destination.on_disk.datafiles import align, write_data_file
    from destination.rpc.proto_convert import table_from_proto
    from destination.store.versions import PendingVersion

    store = TableStore(open_storage(spec_of(configuration)))
    table_def = table_from_proto(t)
    legacy = TableDef(table_def.name, table_def.columns, placement=HASH_BUCKETS)

    def produce(base, target):  # type: ignore[no-untyped-def]
        files = []
        for bucket, ids in enumerate(rows_per_bucket):
            rows = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"old {i}" for i in ids],
                             "_fivetran_synced": pa.array(np.full(len(ids), 1_700_000_000_000_000), pa.timestamp("us", tz="UTC")),
                             "_fivetran_deleted": pa.array(np.zeros(len(ids), dtype=bool))})
            files.append(write_data_file(store.storage, target.directory, f"b{bucket:04d}-legacy.parquet",
                                         align(rows, legacy), legacy, bucket))
        return PendingVersion(legacy, files, [], {"kind": "write_batch"})
    commit_one_step(store, "old", t.name, produce)
    current = store.load("old", t.name)
    raw = json.loads(store.storage.read_bytes(f"{current.directory}/{records.TABLE_JSON}"))  # type: ignore[union-attr]
    raw["table"].pop("placement")  # exactly what an older version wrote
    raw["table"]["bucket_count"] = 16
    store.storage.write_bytes(f"{current.directory}/{records.TABLE_JSON}", json.dumps(raw).encode())
    assert not store.load("old", t.name).table.in_key_ranges  # type: ignore[union-attr]
    return store


def test_a_table_in_key_hash_buckets_is_placed_in_key_ranges_by_its_first_write(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = table("legacy", [("id", "LONG", True), ("v", "STRING"), *SYS])
    rng = np.random.default_rng(7)
    ids = rng.permutation(3000)
    store = _legacy_table(configuration, t, [ids[i::3].tolist() for i in range(3)])
    before = store.load("old", "legacy")
    assert before is not None and before.rows == 3000
    write(stub, configuration, "old", t, tmp_path, update=[r(5, "new five")], replace=[r(5000, "new")])
    after = store.load("old", "legacy")
    assert after is not None and after.table.in_key_ranges and after.version == before.version + 2
    spans = sorted((f.first_key[0], f.last_key[0]) for f in after.files)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), "files no longer overlap"
    got = {x["id"]: x["v"] for x in rows_of(configuration, "old", "legacy")}
    assert len(got) == 3001 and got[5] == "new five" and got[5000] == "new" and got[2999] == "old 2999"


def test_many_small_syncs_are_compacted_into_files_near_the_target(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    configuration = {**configuration, "target_file_size": "64KiB"}
    t = table("small", [("id", "LONG", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "many", t)
    store = TableStore(open_storage(spec_of(configuration)))
    counts = []
    for sync in range(24):  # each sync appends new keys: one small file each, unless compaction folds them
        write(stub, configuration, "many", t, tmp_path,
              replace=[r(sync * 500 + i, f"text of row {sync * 500 + i} " * 3) for i in range(500)])
        counts.append(len(store.load("many", "small").files))  # type: ignore[union-attr]
    current = store.load("many", "small")
    assert current is not None and current.rows == 24 * 500
    assert max(counts) < 24 // 2 and counts[-1] < 24 // 2, counts
    assert sum(f.bytes < 64 * 1024 // 2 for f in current.files) < 4 + 2, [f.bytes for f in current.files]
    spans = sorted((f.first_key[0], f.last_key[0]) for f in current.files)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    assert sorted(x["id"] for x in rows_of(configuration, "many", "small")) == list(range(24 * 500))


def _tier(size: int, target: int) -> int:
    """The size tiers as docs/design/write-path.md states them: level k below target / 4**k, down to level 8."""
    return next((k for k in range(8) if size >= target / 4 ** (k + 1)), 8)


# the tiers are the planner's, the same on either backend: local only (on S3, compaction is
# test_many_small_syncs_are_compacted_into_files_near_the_target's s3 case, retention retiring a version at every
# commit tests/test_log_pruning.py's s3 cases, delta-rs and DuckDB reading tests/test_table_formats.py's)
@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_small_syncs_keep_tiered_files_and_rewrite_each_row_a_bounded_number_of_times(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Appends of 100 random-text rows with retention retiring a version every commit: each row's file is rewritten
    by compaction at most once per level below its first file's (the tiers' promise), the largest files are never
    touched by a later small sync, and the records files, delta-rs and DuckDB's Iceberg reader read the model's rows."""
    from tests.lake_readers import delta_rs, iceberg_duckdb, rows

    target = 256 * 1024
    configuration = {**configuration, "target_file_size": "256KiB", "retention_versions": "2",
                     "retention_min_age_seconds": "0"}
    t = table("tiers", [("id", "LONG", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "tiered", t)
    store = TableStore(open_storage(spec_of(configuration)))
    rng = random.Random(7)
    model: dict[int, str] = {}
    holders: dict[int, set[str]] = {}  # key → the data files that have held it
    first_level: dict[int, int] = {}
    for sync in range(40):
        batch = {sync * 100 + i: rng.randbytes(24).hex() for i in range(100)}
        write(stub, configuration, "tiered", t, tmp_path, replace=[r(k, v) for k, v in batch.items()])
        model.update(batch)
        current = store.load("tiered", "tiers")
        assert current is not None
        for f in current.files:
            for key in range(int(f.first_key[0]), int(f.last_key[0]) + 1):
                if key in model:
                    holders.setdefault(key, set()).add(f.name)
                    first_level.setdefault(key, _tier(f.bytes, target))
    rewrites = {k: len(names) - 1 for k, names in holders.items()}
    worst = max(rewrites.values())
    assert all(rewrites[k] <= first_level[k] for k in model), \
        f"rows rewritten more often than their tiers allow: worst {worst}, levels {sorted(set(first_level.values()))}"
    assert worst >= 1, "the small files were compacted at all"
    current = store.load("tiered", "tiers")
    assert current is not None
    largest = max(current.files, key=lambda f: f.bytes)
    write(stub, configuration, "tiered", t, tmp_path, replace=[r(3_990 + i, "late") for i in range(10)])
    model.update({3_990 + i: "late" for i in range(10)})
    after = store.load("tiered", "tiers")
    assert after is not None and largest.name in {f.name for f in after.files}, "a small sync rewrote the largest file"
    columns = ["id", "v"]
    want = rows([{"id": k, "v": v} for k, v in model.items()], columns)
    assert rows(rows_of(configuration, "tiered", "tiers"), columns) == want
    spec, url = spec_of(configuration), store.storage.url("tiered/tiers")
    assert rows(delta_rs(spec, url), columns) == want
    assert rows(iceberg_duckdb(spec, url), columns) == want


# where a rewrite ends a file is the planner's choice, the same on either backend: local only
@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_recent_keys_move_out_of_a_large_file_once_and_later_syncs_rewrite_only_small_files(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A table loaded at once (one file), then small syncs of new keys and updates and deletes of recent keys: the
    first sync rewrites the loaded file once, as a large file of the rows it does not touch and a small one from its
    first key on; every later sync leaves the large file as it is and rewrites a small share of the table."""
    from tests.lake_readers import delta_rs, rows

    configuration = {**configuration, "target_file_size": "16MiB"}
    t = table("recent", [("id", "LONG", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "steady", t)
    store = TableStore(open_storage(spec_of(configuration)))
    rng = random.Random(11)
    model = {k: rng.randbytes(24).hex() for k in range(20_000)}
    write(stub, configuration, "steady", t, tmp_path, replace=[r(k, v) for k, v in model.items()])
    loaded = store.load("steady", "recent")
    assert loaded is not None and len(loaded.files) == 1
    top = 20_000
    shares = []
    for _sync in range(12):
        live = sorted(model)
        recent = live[-400:]  # the keys of the last few syncs
        touched = rng.sample(recent, 30)
        updated, deleted = touched[:25], touched[25:]
        new = {top + i: rng.randbytes(24).hex() for i in range(60)}
        top += 60
        changed = {k: rng.randbytes(24).hex() for k in updated}
        before = store.load("steady", "recent")
        assert before is not None
        write(stub, configuration, "steady", t, tmp_path, replace=[r(k, v) for k, v in {**new, **changed}.items()],
              delete=[{"id": str(k), "v": None, "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": None}
                      for k in deleted])
        model.update(new)
        model.update(changed)
        for k in deleted:
            del model[k]
        after = store.load("steady", "recent")
        assert after is not None
        kept = {f.name for f in after.files}
        rewritten = sum(f.bytes for f in before.files if f.name not in kept)
        shares.append(rewritten / sum(f.bytes for f in before.files))
    assert shares[0] > 0.9, shares  # the loaded file, once
    assert max(shares[1:]) < 0.2, f"later small syncs rewrote large shares of the table: {shares}"
    assert loaded.files[0].name not in kept
    columns = ["id", "v"]
    want = rows([{"id": k, "v": v} for k, v in model.items()], columns)
    assert rows(rows_of(configuration, "steady", "recent"), columns) == want
    assert rows(delta_rs(spec_of(configuration), store.storage.url("steady/recent")), columns) == want


def test_runs_are_staged_with_lz4_when_the_scratch_disk_lacks_room(stub, configuration, tmp_path, through_spark_tasks,  # type: ignore[no-untyped-def]
                                                                  monkeypatch, capsys) -> None:
    """Sorted runs go uncompressed to a scratch disk with room for them; when the disk's free space is short of
    what they would take (here: the headroom asked for is made larger than any disk), they are staged with lz4
    and the write lands the same rows."""
    t = table("lz", [("id", "LONG", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "runs", t)

    def send(path: Path, kind: str = "replace") -> None:
        request = sdk.WriteBatchRequest(configuration=configuration, schema_name="runs", table=t, file_params=params())
        getattr(request, f"{kind}_files").append(str(path))
        request.keys[str(path)] = KEY
        assert stub.WriteBatch(request).WhichOneof("response") == "success"

    send(_big_csv(tmp_path / "load.csv.zstd.aes", np.arange(50_000), "initial"))
    assert "staging sorted runs with lz4" not in capsys.readouterr().out
    monkeypatch.setattr(sorted_runs, "SCRATCH_HEADROOM", 1e18)
    send(_big_csv(tmp_path / "more.csv.zstd.aes", np.arange(40_000, 90_000), "more"))
    send(_big_csv(tmp_path / "upd.csv.zstd.aes", np.arange(0, 90_000, 7), "updated"), "update")
    assert capsys.readouterr().out.count("staging sorted runs with lz4") == 2
    got = {x["id"]: x["v"].split()[0] for x in rows_of(configuration, "runs", "lz")}
    assert sorted(got) == list(range(90_000))
    assert all(got[i] == ("updated" if i % 7 == 0 else "more" if i >= 40_000 else "initial") for i in got)


def test_a_key_a_delimited_variant_cannot_store_is_refused_and_nothing_committed(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """bluelabs writes an empty string as the empty field, which reads back as NULL: a value it NULLs and records,
    but a key it refuses (a NULLed key would no longer match its row); the table stays as it was."""
    configuration = {**configuration, "records_format": "delimited", "records_variant": "bluelabs"}
    t = table("k", [("id", "STRING", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "dk", t)
    ts = "2024-01-01T00:00:00Z"
    write(stub, configuration, "dk", t, tmp_path, replace=[{"id": "a", "v": "", "_fivetran_synced": ts,
                                                            "_fivetran_deleted": "false"}])
    before = TableStore(open_storage(spec_of(configuration))).load("dk", "k")
    path = write_csv(tmp_path / "empty-key.csv.zstd.aes", [c.name for c in t.columns],
                     [{"id": "", "v": "x", "_fivetran_synced": ts, "_fivetran_deleted": "false"}], KEY)
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name="dk", table=t, file_params=params(),
                                    replace_files=[str(path)], keys={str(path): KEY})
    try:
        answer = str(stub.WriteBatch(request))
    except grpc.RpcError as e:  # a refused request may come back as a gRPC error or as a task answer
        answer = str(e.details())
    assert "key column 'id'" in answer and "table 'k'" in answer, answer
    after = TableStore(open_storage(spec_of(configuration))).load("dk", "k")
    assert before is not None and after is not None and after.version == before.version
    assert [(x["id"], x["v"]) for x in rows_of(configuration, "dk", "k")] == [("a", None)]  # v "" NULLed, recorded
