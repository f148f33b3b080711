"""One large value must not stop a sync (issue 15 §2): STRING, JSON and BINARY values of 1, 8, 32 and 90 MB, in
CSV and Parquet batch files, go through the real gRPC server and Spark on every decode path (on the driver, in
Spark tasks, and in tasks that read the file's copy staged in the table's storage because executors cannot read the
server's disk) and are read back from the stored Parquet byte for byte."""
from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from destination.protocol import sdk
from destination.runtime.settings import ServerOptions
from destination.storage.opening import open_storage
from destination.tester.batchgen import csv_bytes, parquet_bytes, seal
from destination.write.staging import STAGING_DIR
from tests.conftest import spec_of
from tests.rpc_helpers import rows_of, table
from tests.test_write_path import KEY, SYS, create, params

MB = 1_000_000
SIZES = (1 * MB, 8 * MB, 32 * MB, 90 * MB)
COLUMNS = [("id", "INT", True), ("s", "STRING"), ("j", "JSON"), ("b", "BINARY"), *SYS]
SMALL = {"s": "small", "j": "{}", "b": base64.b64encode(b"small").decode()}
PATTERN = 'Line "one", CRLF\r\nlone CR\rlone LF\nunicode é ✓ \u2028 end; '


def text_of(size: int, seed: int) -> str:
    """`size` bytes of UTF-8 text with quotes, commas, CR, LF, CRLF and non-ASCII, different per seed."""
    unit = f"[{seed}] {PATTERN}" * 1000
    text = unit * (size // len(unit.encode()) + 1)
    return text.encode()[:size].decode("utf-8", errors="ignore")


def large_value(column: str, size: int, seed: int) -> tuple[str, Any]:
    """(text as a batch file carries it, value as stored) of about `size` bytes for a column."""
    if column == "j":
        text = json.dumps({"seed": seed, "body": text_of(size, seed)}, ensure_ascii=False)
        return text, text
    if column == "b":
        raw = (bytes(range(256)) * (size // 256 + 1))[:size - seed] + bytes([seed])
        return base64.b64encode(raw).decode(), raw
    text = text_of(size, seed)
    return text, text


def rows_for(column: str) -> tuple[list[dict[str, str]], dict[int, Any]]:
    """One row per size with a large value in `column` (small ones elsewhere); the stored values expected."""
    rows, expected = [], {}
    for i, size in enumerate(SIZES):
        text, stored = large_value(column, size, i)
        rows.append({"id": str(i), **SMALL, column: text, "_fivetran_synced": "2024-01-01T00:00:00Z",
                     "_fivetran_deleted": "false"})
        expected[i] = stored
    return rows, expected


def batch_file(tmp_path: Path, column: str, rows: list[dict[str, str]], kind: str) -> Path:
    names = [c[0] for c in COLUMNS]
    plain = (parquet_bytes(names, {"b"}, rows) if kind == "parquet"
             else csv_bytes(names, rows, random.Random(1)))
    path = tmp_path / f"large-{column}.{kind}.zstd.aes"
    path.write_bytes(seal(plain, KEY))
    return path


def write_and_check(stub: Any, configuration: dict[str, str], tmp_path: Path, kind: str,
                    max_request_bytes: int | None = None) -> None:
    name = f"large_{kind}"
    t = table(name, COLUMNS)
    create(stub, configuration, "big", t)
    for column in ("s", "j", "b"):
        rows, expected = rows_for(column)
        path = batch_file(tmp_path, column, rows, kind)
        if max_request_bytes is not None:
            assert path.stat().st_size <= max_request_bytes, "the request would not take the path under test"
        request = sdk.WriteBatchRequest(configuration=configuration, schema_name="big", table=t, file_params=params())
        request.replace_files.append(str(path))
        request.keys[str(path)] = KEY
        answer = stub.WriteBatch(request)
        assert answer.WhichOneof("response") == "success", f"{column}: {str(answer)[:300]}"
        path.unlink()
        stored = {row["id"]: row[column] for row in rows_of(configuration, "big", name, validate=False)}
        for i, value in expected.items():
            assert stored[i] == value, f"{column} value of {SIZES[i]} bytes ({kind}) altered"
        del rows, expected, stored


# each decode path in both formats, on one backend at least: the driver's on the local one, the tasks' on S3, the
# staged copy's on both (a copy staged in the table's storage: a local folder or S3)
@pytest.mark.parametrize("configuration", ["local"], indirect=True)
@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_large_values_decoded_on_the_driver(stub, configuration, tmp_path, kind, capsys) -> None:  # type: ignore[no-untyped-def]
    """Files small enough for the driver path whose rows decode to more than the driver passes through the Spark
    job (130 MB of values in a file of a few MB: a 1 GiB JVM heap ran out of memory) are decoded again by tasks."""
    write_and_check(stub, configuration, tmp_path, kind, max_request_bytes=16 << 20)
    assert capsys.readouterr().out.count("decoding them in Spark tasks instead") == 3  # one per large column


@pytest.mark.parametrize("configuration", ["s3"], indirect=True)
@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_large_values_decoded_in_spark_tasks(stub, configuration, tmp_path, kind, through_spark_tasks) -> None:  # type: ignore[no-untyped-def]
    write_and_check(stub, configuration, tmp_path, kind)


@pytest.fixture(scope="module")
def staging_stub(spark, tmp_path_factory) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """A server configured for a non-local Spark master: the batch files are staged in the table's storage (here
    the session is the tests' local one, so the tasks run, but they decode the staged copy, not the file)."""
    from destination.protocol import sdk_grpc
    from destination.rpc.server import build_server

    server, _health, _service, port = build_server(
        ServerOptions(root=str(tmp_path_factory.mktemp("staging-root")), spark_master="spark://executors.elsewhere:7077",
                      small_request_bytes=0), 0)  # every request through Spark tasks
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield sdk_grpc.DestinationConnectorStub(channel)
    channel.close()
    server.stop(5).wait()


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_large_values_decoded_from_a_staged_copy(staging_stub, configuration, tmp_path, kind) -> None:  # type: ignore[no-untyped-def]
    write_and_check(staging_stub, configuration, tmp_path, kind)
    assert list(open_storage(spec_of(configuration)).list_recursive(STAGING_DIR)) == []
