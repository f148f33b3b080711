"""A transient S3 outage during a write, made real by a TCP proxy in front of SeaweedFS (tests/faultproxy.py):
retried with backoff inside the write; once the retries are spent, gRPC UNAVAILABLE (retryable), not a Task, and
no partial version is visible."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from destination.protocol import sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from tests.batchfiles import write_csv
from tests.conftest import s3_configuration, spec_of
from tests.faultproxy import UNTIL_RESTORED, FaultProxy
from tests.rpc_helpers import rows_of, table

T = table("orders", [("id", "LONG", True), ("s", "STRING"), ("_fivetran_synced", "UTC_DATETIME"),
                     ("_fivetran_deleted", "BOOLEAN")])
KEY = bytes(range(32))
# the request that must survive: the new version's `_manifest`, written by the driver after the Spark job
MANIFEST = rb"^PUT [^ ]*/_manifest HTTP/1\.1"


@pytest.fixture
def proxy(s3_server) -> Iterator[FaultProxy]:  # type: ignore[no-untyped-def]
    proxy = FaultProxy(s3_server.endpoint)
    yield proxy
    proxy.close()


@pytest.fixture
def through_proxy(proxy: FaultProxy, s3_server) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """A fresh S3 root reached through the proxy (a new endpoint, so the server opens a new store for it)."""
    return {**s3_configuration(s3_server, f"outage-{uuid.uuid4().hex[:12]}"), "s3_endpoint": proxy.endpoint}


def _write(stub: Any, configuration: dict[str, str], first_id: int, tmp_path: Path) -> Any:
    rows = [{"id": str(i), "s": f"row {i}", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}
            for i in range(first_id, first_id + 50)]
    path = write_csv(tmp_path / f"rows-{first_id}.csv.zstd.aes", [c.name for c in T.columns], rows, KEY)
    return stub.WriteBatch(sdk.WriteBatchRequest(
        configuration=configuration, schema_name="s", table=T, replace_files=[str(path)], keys={str(path): KEY},
        file_params=sdk.FileParams(compression=sdk.Compression.Value("ZSTD"), encryption=sdk.Encryption.Value("AES"),
                                   null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)))


def _created(stub: Any, configuration: dict[str, str]) -> None:
    assert stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="s", table=T)).success


def test_a_short_outage_while_writing_the_manifest_is_retried(stub, through_proxy, proxy, s3_server,  # type: ignore[no-untyped-def]
                                                              tmp_path: Path) -> None:
    _created(stub, through_proxy)
    # the manifest's PUT and the four attempts after it fail: as many as botocore made before (1 + 4 retries);
    # the sixth attempt (RETRY_ATTEMPTS) succeeds
    proxy.arm(MANIFEST, attempts=4)
    answer = _write(stub, through_proxy, 0, tmp_path)
    assert answer.WhichOneof("response") == "success", answer
    assert proxy.failed == 5  # the outage did happen, inside this write
    direct = {**through_proxy, "s3_endpoint": s3_server.endpoint}
    assert sorted(r["id"] for r in rows_of(direct, "s", "orders")) == list(range(50))


def test_an_outage_longer_than_the_retries_is_unavailable_and_commits_nothing(  # type: ignore[no-untyped-def]
        stub, through_proxy, proxy, s3_server, tmp_path: Path, server_options) -> None:
    server_options(s3_retry_attempts=2)  # RECORDS_DESTINATION_S3_RETRY_ATTEMPTS; the store of a new spec uses it
    _created(stub, through_proxy)
    proxy.arm(MANIFEST, attempts=UNTIL_RESTORED)
    with pytest.raises(grpc.RpcError) as failed:
        _write(stub, through_proxy, 0, tmp_path)
    proxy.restore()
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value.details()
    assert "s.orders" in failed.value.details() and "did not answer after 2 attempts" in failed.value.details()
    direct = {**through_proxy, "s3_endpoint": s3_server.endpoint}
    current = TableStore(open_storage(spec_of(direct))).load("s", "orders")
    assert current is not None and current.version == 1  # the version being written never became visible
    assert rows_of(direct, "s", "orders") == []
    assert _write(stub, through_proxy, 0, tmp_path).WhichOneof("response") == "success"  # Fivetran's retry
    assert len(rows_of(direct, "s", "orders")) == 50


def test_an_outage_in_a_spark_tasks_data_file_write_is_retried_then_unavailable(  # type: ignore[no-untyped-def]
        stub, through_proxy, proxy, s3_server, tmp_path: Path) -> None:
    _created(stub, through_proxy)
    # a merge task's PUT of its new data file (pyarrow's S3 filesystem, in the Spark worker)
    proxy.arm(rb"^PUT [^ ?]*\.parquet[ ?]", attempts=UNTIL_RESTORED)  # a single PUT or a multipart part
    with pytest.raises(grpc.RpcError) as failed:
        _write(stub, through_proxy, 0, tmp_path)
    proxy.restore()
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value.details()
    assert "object storage stayed unreachable" in failed.value.details()
    assert proxy.failed > 1  # the outage outlasted the request that started it
    direct = {**through_proxy, "s3_endpoint": s3_server.endpoint}
    assert TableStore(open_storage(spec_of(direct))).load("s", "orders").version == 1  # type: ignore[union-attr]
    assert _write(stub, through_proxy, 0, tmp_path).WhichOneof("response") == "success"
    assert len(rows_of(direct, "s", "orders")) == 50


def test_an_outage_in_a_data_file_write_on_the_server_is_unavailable(  # type: ignore[no-untyped-def]
        stub, through_proxy, proxy, s3_server) -> None:
    # CreateTable writes the empty table's data file through pyarrow in the server process itself
    proxy.arm(rb"^PUT [^ ?]*\.parquet[ ?]", attempts=UNTIL_RESTORED)
    with pytest.raises(grpc.RpcError) as failed:
        _created(stub, through_proxy)
    proxy.restore()
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value.details()
    assert "object storage stayed unreachable" in failed.value.details()
    direct = {**through_proxy, "s3_endpoint": s3_server.endpoint}
    assert TableStore(open_storage(spec_of(direct))).load("s", "orders") is None  # nothing committed
    _created(stub, through_proxy)  # Fivetran's retry
    assert rows_of(direct, "s", "orders") == []


def test_a_body_broken_off_while_a_small_object_is_read_is_read_again(through_proxy, proxy) -> None:  # type: ignore[no-untyped-def]
    """A data file of known size is read with one GET (Storage.open_input): a connection dropped in the middle of
    its body (botocore retries a request, not the reading of its body) is read again, and once every attempt broke
    off the read is StorageUnavailable (Fivetran retries), not a StorageError."""
    from destination.runtime.errors import StorageUnavailable
    from destination.storage.s3 import retry_attempts

    storage = open_storage(spec_of(through_proxy))
    data = bytes(range(256)) * 800  # 200 KB
    storage.write_bytes("objects/part-1.parquet", data)
    proxy.cut_responses(rb"^GET [^ ]*/objects/part-1\.parquet ", keep=2000, times=1)
    with storage.open_input("objects/part-1.parquet", size=len(data)) as source:
        assert source.read() == data
    assert [r for r in proxy.requests if r[0] == "GET" and r[1].endswith("/objects/part-1.parquet")] == \
        [("GET", proxy.requests[-1][1])] * 2  # broken off once, read again
    attempts = retry_attempts(storage.spec)
    proxy.cut_responses(rb"^GET [^ ]*/objects/part-1\.parquet ", keep=2000, times=attempts)
    with pytest.raises(StorageUnavailable, match=r"objects/part-1\.parquet"), \
            storage.open_input("objects/part-1.parquet", size=len(data)):
        pass
