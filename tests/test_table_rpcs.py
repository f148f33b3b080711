"""CreateTable, DescribeTable, AlterTable and Truncate through the gRPC server, on both backends."""
from __future__ import annotations

import datetime as dt
import uuid

import grpc
import pytest

from destination.protocol import common, sdk
from tests.rpc_helpers import describe, rows_of, table

ALL_TYPES = [("id", "INT", True), ("b", "BOOLEAN"), ("s16", "SHORT"), ("l", "LONG"), ("d", "DECIMAL", False, (38, 37)),
             ("f", "FLOAT"), ("db", "DOUBLE"), ("nd", "NAIVE_DATE"), ("ndt", "NAIVE_DATETIME"), ("u", "UTC_DATETIME"),
             ("bin", "BINARY"), ("x", "XML"), ("s", "STRING"), ("j", "JSON"), ("t", "NAIVE_TIME"),
             ("_fivetran_synced", "UTC_DATETIME"), ("_fivetran_deleted", "BOOLEAN")]


def create(stub, configuration, schema, t):  # type: ignore[no-untyped-def]
    return stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name=schema, table=t))


def test_create_and_describe_round_trip_every_type(stub, configuration) -> None:  # type: ignore[no-untyped-def]
    schema, t = "all types ✓", table("every.type", ALL_TYPES)
    assert create(stub, configuration, schema, t).success
    described = describe(stub, configuration, schema, "every.type")
    assert described.WhichOneof("response") == "table"
    assert described.table == t  # names, order, types, key flags, DECIMAL(38,37) all round-trip
    assert rows_of(configuration, schema, "every.type") == []
    assert create(stub, configuration, schema, t).success  # an identical retry succeeds
    other = table("every.type", ALL_TYPES[:3])
    answer = create(stub, configuration, schema, other)
    assert answer.WhichOneof("response") == "task" and "missing from the request" in answer.task.message


def test_describe_missing_table_is_only_not_found(stub, configuration) -> None:  # type: ignore[no-untyped-def]
    answer = describe(stub, configuration, "nope", "nothing")
    assert answer.WhichOneof("response") == "not_found" and answer.not_found


def _write_rows(stub, configuration, schema, t, rows, tmp_path):  # type: ignore[no-untyped-def]
    from tests.batchfiles import write_csv

    key = bytes(range(32))
    path = write_csv(tmp_path / f"batch-{uuid.uuid4().hex}.csv.zstd.aes", [c.name for c in t.columns], rows, key)
    from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING

    request = sdk.WriteBatchRequest(configuration=configuration, schema_name=schema, table=t, replace_files=[str(path)],
                                    keys={str(path): key}, file_params=sdk.FileParams(
                                        compression=sdk.Compression.Value("ZSTD"), encryption=sdk.Encryption.Value("AES"),
                                        null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING))
    answer = stub.WriteBatch(request)
    assert answer.WhichOneof("response") == "success", answer
    return answer


def test_alter_table_changes_types_key_and_drops_only_when_asked(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    schema = "alter"
    t = table("t", [("id", "INT", True), ("amount", "DOUBLE"), ("code", "STRING"), ("old", "STRING"),
                    ("_fivetran_synced", "UTC_DATETIME"), ("_fivetran_deleted", "BOOLEAN")])
    assert create(stub, configuration, schema, t).success
    _write_rows(stub, configuration, schema, t, [
        {"id": "1", "amount": "100.45", "code": "42", "old": "a", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"},
        {"id": "2", "amount": "7", "code": "not a number", "old": "b", "_fivetran_synced": "2024-01-01T00:00:01Z", "_fivetran_deleted": "false"},
    ], tmp_path)
    # types change (DOUBLE→FLOAT keeps 100.45, STRING→INT would lose row 2's value), a column is added,
    # `old` is not sent: refused while a value would be lost (tests/test_alter_policy.py), applied once it converts
    altered = table("t", [("id", "INT", True), ("amount", "FLOAT"), ("code", "INT"), ("extra", "STRING"),
                          ("_fivetran_synced", "UTC_DATETIME"), ("_fivetran_deleted", "BOOLEAN")])
    answer = stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name=schema, table=altered))
    assert answer.WhichOneof("response") == "task" and "'code' STRING -> INT: 1 stored values" in answer.task.message
    _write_rows(stub, configuration, schema, t, [
        {"id": "2", "amount": "7", "code": None, "old": "b", "_fivetran_synced": "2024-01-01T00:00:01Z", "_fivetran_deleted": "false"},
    ], tmp_path)
    answer = stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name=schema, table=altered))
    assert answer.WhichOneof("response") == "success", answer
    got = {r["id"]: r for r in rows_of(configuration, schema, "t")}
    assert got[1]["amount"] == pytest.approx(100.45, rel=1e-6) and got[1]["code"] == 42 and got[1]["old"] == "a"
    assert got[2]["code"] is None
    assert got[1]["extra"] is None
    names = [c.name for c in describe(stub, configuration, schema, "t").table.columns]
    assert "old" in names  # drop_columns=false never drops
    answer = stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name=schema, table=altered,
                                                   drop_columns=True))
    assert answer.WhichOneof("response") == "success"
    assert "old" not in [c.name for c in describe(stub, configuration, schema, "t").table.columns]
    assert "old" not in rows_of(configuration, schema, "t")[0]
    # primary-key change: `code` joins the key; rows survive and are re-bucketed by the new key
    rekeyed = table("t", [("id", "INT", True), ("amount", "FLOAT"), ("code", "INT", True), ("extra", "STRING"),
                          ("_fivetran_synced", "UTC_DATETIME"), ("_fivetran_deleted", "BOOLEAN")])
    got_answer = stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name=schema, table=rekeyed))
    assert got_answer.WhichOneof("response") == "task"  # row 2 has a NULL `code`: cannot be a key
    _write_rows(stub, configuration, schema, altered, [
        {"id": "2", "amount": "7", "code": "5", "extra": "e", "_fivetran_synced": "2024-01-01T00:00:02Z", "_fivetran_deleted": "false"}], tmp_path)
    answer = stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name=schema, table=rekeyed))
    assert answer.WhichOneof("response") == "success", answer
    keys = [c.name for c in describe(stub, configuration, schema, "t").table.columns if c.primary_key]
    assert keys == ["id", "code"]
    assert sorted((r["id"], r["code"]) for r in rows_of(configuration, schema, "t")) == [(1, 42), (2, 5)]


def test_alter_missing_table_is_a_task(stub, configuration) -> None:  # type: ignore[no-untyped-def]
    answer = stub.AlterTable(sdk.AlterTableRequest(configuration=configuration, schema_name="s", table=table("ghost", [("id", "INT", True)])))
    assert answer.WhichOneof("response") == "task" and "does not exist" in answer.task.message


def test_truncate_hard_soft_and_missing(stub, configuration, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from google.protobuf.timestamp_pb2 import Timestamp

    schema = "trunc"
    t = table("t", [("id", "INT", True), ("_fivetran_synced", "UTC_DATETIME"), ("_fivetran_deleted", "BOOLEAN")])
    assert create(stub, configuration, schema, t).success
    _write_rows(stub, configuration, schema, t, [
        {"id": str(i), "_fivetran_synced": f"2024-01-01T00:00:0{i}.{'999999' if i == 2 else '000'}Z", "_fivetran_deleted": "false"}
        for i in range(1, 5)], tmp_path)
    cutoff = Timestamp(seconds=int(dt.datetime(2024, 1, 1, 0, 0, 3, tzinfo=dt.UTC).timestamp()))
    soft = sdk.TruncateRequest(configuration=configuration, schema_name=schema, table_name="t",
                               synced_column="_fivetran_synced", utc_delete_before=cutoff)
    soft.soft.deleted_column = "_fivetran_deleted"
    assert stub.Truncate(soft).success
    deleted = {r["id"]: r["_fivetran_deleted"] for r in rows_of(configuration, schema, "t")}
    assert deleted == {1: True, 2: True, 3: False, 4: False}  # strictly before 00:00:03.000 (2.999999 is before)
    hard = sdk.TruncateRequest(configuration=configuration, schema_name=schema, table_name="t",
                               synced_column="_fivetran_synced", utc_delete_before=cutoff)
    assert stub.Truncate(hard).success
    assert sorted(r["id"] for r in rows_of(configuration, schema, "t")) == [3, 4]
    missing = sdk.TruncateRequest(configuration=configuration, schema_name=schema, table_name="absent",
                                  synced_column="_fivetran_synced", utc_delete_before=cutoff)
    assert stub.Truncate(missing).success


def test_bad_root_and_bad_credentials_are_tasks(stub, configuration,  # type: ignore[no-untyped-def]
                                               server_options) -> None:
    server_options(s3_retry_attempts=2)  # RECORDS_DESTINATION_S3_RETRY_ATTEMPTS: the unreachable endpoint fails quickly
    if configuration["root"].startswith("s3://"):
        bad = dict(configuration, aws_secret_access_key="wrong-secret")
        answer = describe(stub, bad, "s", "t")
        assert answer.WhichOneof("response") == "task" and "secret" in answer.task.message.lower()
        test = stub.Test(common.TestRequest(name="storage", configuration=bad))
        assert test.WhichOneof("response") == "failure" and "secret" in test.failure.lower()
        missing = dict(configuration, root="s3://no-such-bucket-here/x")
        answer = describe(stub, missing, "s", "t")
        assert answer.WhichOneof("response") == "task" and "bucket" in answer.task.message.lower()
        # nothing listens there: connection refused is transient, so UNAVAILABLE once the retries are spent
        unreachable = dict(configuration, s3_endpoint="http://127.0.0.1:9")
        with pytest.raises(grpc.RpcError) as err:
            describe(stub, unreachable, "s", "t")
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "`s3_endpoint`" in err.value.details()
    else:
        blocker = configuration["root"] + "-file"
        open(blocker, "w").close()
        answer = describe(stub, {"root": blocker + "/sub"}, "s", "t")
        assert answer.WhichOneof("response") == "task" and "root directory" in answer.task.message
        test = stub.Test(common.TestRequest(name="storage", configuration={"root": blocker + "/sub"}))
        assert test.WhichOneof("response") == "failure" and "root directory" in test.failure
    assert stub.Test(common.TestRequest(name="storage", configuration=configuration)).success


def test_unknown_type_is_invalid_argument(stub, configuration) -> None:  # type: ignore[no-untyped-def]
    t = common.Table(name="t")
    t.columns.add(name="a", type=99)
    with pytest.raises(grpc.RpcError) as err:
        create(stub, configuration, "s", t)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unsupported data type" in err.value.details()


