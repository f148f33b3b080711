"""The real `records-destination serve` process: grpcurl, health, JSON logs, SIGTERM with a call in flight."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from destination.protocol import sdk, sdk_grpc
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from testbed.s3server import free_port
from tests.batchfiles import write_csv
from tests.rpc_helpers import table

pytestmark = pytest.mark.serve  # every test here starts a `serve` process

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen, str, Path, Path]]:
    """(the process, its address, its log, its root)."""
    root = tmp_path_factory.mktemp("proc-root")
    port = free_port()
    log = root.parent / "server.stdout"
    proc = subprocess.Popen([str(BIN / "records-destination"), "serve", "--port", str(port), "--root", str(root),
                             "--spark-master", "local[2]"], stdout=open(log, "wb"), stderr=subprocess.DEVNULL)
    address = f"localhost:{port}"
    deadline = time.monotonic() + 120
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server never reported SERVING"
            time.sleep(0.5)
    yield proc, address, log, root
    if proc.poll() is None:
        proc.kill()


def grpcurl(*args: str) -> str:
    out = subprocess.run([str(BIN / "grpcurl"), "-plaintext", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_grpcurl_lists_describes_and_calls(server_process) -> None:  # type: ignore[no-untyped-def]
    _proc, address, _log, _root = server_process
    services = grpcurl(address, "list").split()
    assert "fivetran_sdk.v2.DestinationConnector" in services and "grpc.health.v1.Health" in services
    described = grpcurl(address, "describe", "fivetran_sdk.v2.DestinationConnector")
    for rpc in ("WriteHistoryBatch", "Migrate", "WriteBatch", "Capabilities"):
        assert f"rpc {rpc}" in described
    assert "string unmodified_string = 4;" in grpcurl(address, "describe", "fivetran_sdk.v2.FileParams")
    assert json.loads(grpcurl("-d", "{}", address, "fivetran_sdk.v2.DestinationConnector/Capabilities")) == {}
    missing = json.loads(grpcurl("-d", '{"schema_name": "s", "table_name": "t"}', address,
                                 "fivetran_sdk.v2.DestinationConnector/DescribeTable"))
    assert missing == {"not_found": True}
    form = json.loads(grpcurl("-d", "{}", address, "fivetran_sdk.v2.DestinationConnector/ConfigurationForm"))
    assert [f["name"] for f in form["fields"]][:5] == ["root", "s3_endpoint", "s3_region", "aws_access_key_id",
                                                         "aws_secret_access_key"]
    assert {t["name"] for t in form["tests"]} == {"storage", "spark", "catalog"}
    assert json.loads(grpcurl("-d", "{}", address, "grpc.health.v1.Health/Check")) == {"status": "SERVING"}


def wait_for(path: Path, caller: threading.Thread, seconds: float = 120) -> None:
    """Until `path` exists (polling the file system, not guessing a delay) while the call is still running."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert caller.is_alive(), "the call finished before its claim was seen"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def test_sigterm_lets_the_call_in_flight_finish(server_process, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc, address, log, root = server_process
    stub = sdk_grpc.DestinationConnectorStub(grpc.insecure_channel(address))
    t = table("big", [("id", "LONG", True), ("s", "STRING"), ("_fivetran_synced", "UTC_DATETIME"),
                      ("_fivetran_deleted", "BOOLEAN")])
    assert stub.CreateTable(sdk.CreateTableRequest(schema_name="s", table=t)).success
    key = os.urandom(32)
    rows = [{"id": str(i), "s": f"value {i} " * 4, "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}
            for i in range(400_000)]
    path = write_csv(tmp_path / "big.csv.zstd.aes", [c.name for c in t.columns], rows, key)
    request = sdk.WriteBatchRequest(schema_name="s", table=t, replace_files=[str(path)], keys={str(path): key},
                                    file_params=sdk.FileParams(compression=1, encryption=1, null_string=NULL_STRING,
                                                               unmodified_string=UNMODIFIED_STRING))
    result: dict[str, object] = {}

    def call() -> None:
        result["response"] = stub.WriteBatch(request, timeout=300)
        result["at"] = time.monotonic()

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(root / "s" / "big" / "_log" / f"{2:020d}.claim", caller)  # the write of version 2 has begun
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    caller.join(300)
    assert proc.wait(120) == 0
    response = result["response"]
    assert response.WhichOneof("response") == "success"  # type: ignore[attr-defined]
    assert result["at"] > signalled  # it was still running when the signal came, and it finished
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    fields = {"level", "message", "message-origin", "schema", "table", "seconds", "phases"}  # the last two: a request's final line
    assert all({"level", "message", "message-origin"} <= set(e) <= fields
               and e["message-origin"] == "sdk_destination"
               and e["level"] in ("INFO", "WARNING", "SEVERE") for e in lines)
    messages = " ".join(e["message"] for e in lines)
    assert "[WriteBatch] s.big: 400000 rows" in messages and "stopped" in messages
    assert key.hex() not in messages and "value 1 " not in messages  # no keys, no row values
