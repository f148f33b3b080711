"""The S3 requests a small sync makes, seen on the wire by a TCP proxy in front of SeaweedFS (tests/faultproxy.py):
a small sync's cost on S3 is its round trips (docs/BENCHMARKS.md, the fleet), so the ones it can do without stay
gone. A new small data file is one PUT (not a multipart upload's three requests) and its size is the bytes written
(no HEAD); a stored small data file is read with one GET (not a HEAD and ranged GETs); each table format lists its
folder once per commit; the version the last sync committed is the next one's base without reading its metadata
documents again, the version a request checked is its commit's base without a second check, the commit record and
Iceberg's hint this process wrote are not read back, and Iceberg's next snapshot is built without reading the last
one's manifests back."""
from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from destination.protocol import sdk
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from tests.batchfiles import write_csv
from tests.conftest import s3_configuration
from tests.faultproxy import FaultProxy
from tests.rpc_helpers import rows_of, table

T = table("orders", [("id", "LONG", True), ("s", "STRING"), ("_fivetran_synced", "UTC_DATETIME"),
                     ("_fivetran_deleted", "BOOLEAN")])
KEY = bytes(range(32))
DATA_FILE = re.compile(r"/v\d+/part-[0-9a-f]+\.parquet")


@pytest.fixture
def proxy(s3_server) -> Iterator[FaultProxy]:  # type: ignore[no-untyped-def]
    proxy = FaultProxy(s3_server.endpoint)
    yield proxy
    proxy.close()


def _sync(stub: Any, configuration: dict[str, str], ids: range, tmp_path: Path) -> None:
    rows = [{"id": str(i), "s": f"row {i}", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}
            for i in ids]
    path = write_csv(tmp_path / f"rows-{ids.start}.csv.zstd.aes", [c.name for c in T.columns], rows, KEY)
    answer = stub.WriteBatch(sdk.WriteBatchRequest(
        configuration=configuration, schema_name="s", table=T, replace_files=[str(path)], keys={str(path): KEY},
        file_params=sdk.FileParams(compression=sdk.Compression.Value("ZSTD"), encryption=sdk.Encryption.Value("AES"),
                                   null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)))
    assert answer.WhichOneof("response") == "success", answer


def test_a_small_sync_writes_and_reads_each_data_file_in_one_request(stub, proxy, s3_server,  # type: ignore[no-untyped-def]
                                                                     tmp_path: Path) -> None:
    configuration = {**s3_configuration(s3_server, f"requests-{uuid.uuid4().hex[:12]}"), "s3_endpoint": proxy.endpoint,
                     "table_formats": "delta,iceberg"}
    assert stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="s", table=T)).success
    _sync(stub, configuration, range(0, 50), tmp_path)
    before = len(proxy.requests)
    _sync(stub, configuration, range(25, 75), tmp_path)  # half updates of the stored file's rows, half new rows
    sync = proxy.requests[before:]

    data = [(method, path) for method, path in sync if DATA_FILE.search(path)]
    puts = Counter(path for method, path in data if method == "PUT")
    assert puts and all(n == 1 for n in puts.values()), data
    assert not [r for r in data if "upload" in r[1] or r[0] == "POST"], data  # no multipart upload
    assert not [r for r in data if r[0] == "HEAD"], data  # sizes are the bytes written or the version's record
    gets = Counter(path for method, path in data if method == "GET")
    assert gets and all(n == 1 for n in gets.values()), data  # the stored file read by the merge; the new one by Iceberg
    listed = [path for method, path in sync if method == "GET" and "list-type=2" in path]
    delta = [path for path in listed if "%2F_delta_log%2F&delimiter=" in path]  # Delta's log, one level
    iceberg = [path for path in listed if "%2Fmetadata%2Fv&" in path]  # Iceberg's metadata files
    assert len(delta) == 1 and len(iceberg) == 1, (delta, iceberg)  # each format's entries listed once

    # Iceberg builds on the snapshot this process committed last: its manifest list and manifest are not read back
    assert not [r for r in sync if r[0] == "GET" and re.search(r"/metadata/[^/?]+\.avro$", r[1])], sync
    # the base is the version the first sync committed: its definition and file list are known, not read again
    assert not [r for r in sync if re.search(r"/v\d+/_(table|files)\.json$", r[1]) and r[0] == "GET"], sync
    # what this process wrote itself is not read back: the version's commit record (for the formats), and Iceberg's
    # hint (it moved the hint to its last commit)
    assert not [r for r in sync if r[0] == "GET" and re.search(r"/_log/0+3\.json$|/version-hint\.text$", r[1])], sync
    # the version the request checked is the commit's base: the base's folder listed once (`_latest` is read again,
    # beside the claim, to see that it still names that version)
    assert len([r for r in sync if r[0] == "GET" and r[1].endswith("%2Fv00000000000000000002%2F&encoding-type=url")]) == 1, sync

    direct = {**configuration, "s3_endpoint": s3_server.endpoint}
    assert sorted(r["id"] for r in rows_of(direct, "s", "orders")) == list(range(75))
