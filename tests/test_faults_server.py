"""Faults a real `records-destination serve` process must recover from by itself: a root it cannot write, its Spark
JVM killed during a write, SIGTERM with a write still running after the grace period."""
from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from destination.on_disk import layout
from destination.protocol import sdk
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from tests.batchfiles import write_csv
from tests.rpc_helpers import rows_of, table
from tests.serverproc import NOT_SERVING, SERVING, ServerProcess, running_python_workers, spark_jvm, start_server, wait_for

pytestmark = pytest.mark.serve  # every test here starts a `serve` process

T = table("orders", [("id", "LONG", True), ("s", "STRING"), ("_fivetran_synced", "UTC_DATETIME"),
                     ("_fivetran_deleted", "BOOLEAN")])
KEY = bytes(range(32))


def _request(path: Path) -> Any:
    return sdk.WriteBatchRequest(schema_name="s", table=T, replace_files=[str(path)], keys={str(path): KEY},
                                 file_params=sdk.FileParams(compression=1, encryption=1, null_string=NULL_STRING,
                                                            unmodified_string=UNMODIFIED_STRING))


def _batch(tmp_path: Path, name: str, ids: list[int]) -> Path:
    rows = [{"id": str(i), "s": f"value {i} " * 4, "_fivetran_synced": "2024-01-01T00:00:00Z",
             "_fivetran_deleted": "false"} for i in ids]
    return write_csv(tmp_path / f"{name}.csv.zstd.aes", [c.name for c in T.columns], rows, KEY)


def _in_flight(server: ServerProcess, request: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Send `request` from a thread; the dict gets its answer or its error."""
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["answer"] = server.stub().WriteBatch(request, timeout=600)
        except grpc.RpcError as exc:
            outcome["error"] = exc

    caller = threading.Thread(target=call)
    caller.start()
    return caller, outcome


def _version(root: Path) -> int | None:
    current = TableStore(open_storage(StorageSpec(root=str(root)))).load("s", "orders")
    return current.version if current else None


def _logged(server: ServerProcess, text: str) -> list[str]:
    return [m["message"] for m in server.messages() if text in m["message"]]


def test_health_is_not_serving_while_the_root_is_not_writable(tmp_path: Path) -> None:
    # after the start (a root that cannot be made at start is refused: tests/test_cli_user_errors.py), the root's
    # parent becomes a regular file, so the root cannot be created or written whatever the uid
    root = tmp_path / "blocked" / "data"
    server = start_server(str(root), tmp_path / "server.log", RECORDS_DESTINATION_HEALTH_INTERVAL="0.3")
    try:
        wait_for(lambda: server.health() == SERVING, "SERVING", server)
        shutil.rmtree(root.parent)
        root.parent.write_text("a file where the root's parent directory should be")
        reason = f"health: NOT_SERVING: cannot create the root directory '{root}': Not a directory"
        wait_for(lambda: bool(_logged(server, reason)), "NOT_SERVING for the root", server)
        assert server.health() == NOT_SERVING
        root.parent.unlink()
        root.parent.mkdir()
        wait_for(lambda: len(_logged(server, "health: SERVING")) >= 2, "SERVING once the root is writable", server)
    finally:
        server.stop()
    assert len(_logged(server, "cannot create the root")) == 1  # one line per change


def test_a_killed_spark_jvm_fails_the_write_in_flight_as_retryable_and_is_replaced(tmp_path: Path) -> None:
    root = tmp_path / "root"
    # health checked every 0.3 s; every write's rows decoded by Spark tasks
    server = start_server(str(root), tmp_path / "server.log", RECORDS_DESTINATION_HEALTH_INTERVAL="0.3",
                          RECORDS_DESTINATION_SMALL_REQUEST_BYTES="0")
    try:
        wait_for(lambda: server.health() == SERVING, "SERVING", server)
        assert server.stub().CreateTable(sdk.CreateTableRequest(schema_name="s", table=T)).success
        caller, outcome = _in_flight(server, _request(_batch(tmp_path, "big", list(range(400_000)))))
        jvm = spark_jvm(server.process.pid)
        assert jvm is not None
        wait_for(lambda: running_python_workers(jvm), "the write's Spark tasks running", server)  # CreateTable ran none
        os.kill(jvm, signal.SIGKILL)
        caller.join(600)
        error = outcome.get("error")
        assert error is not None, outcome
        assert error.code() == grpc.StatusCode.UNAVAILABLE and "Spark JVM stopped" in error.details(), error
        wait_for(lambda: bool(_logged(server, "health: NOT_SERVING: the Spark JVM has stopped")), "NOT_SERVING",
                 server)
        wait_for(lambda: server.health() == SERVING, "SERVING with a new Spark session", server)
        assert _version(root) == 1  # the failed write left no version
        answer = server.stub().WriteBatch(_request(_batch(tmp_path, "small", list(range(50)))), timeout=600)
        assert answer.WhichOneof("response") == "success", answer
        assert len(rows_of({"root": str(root)}, "s", "orders")) == 50
        assert server.health() == SERVING
    finally:
        server.stop()


def test_sigterm_after_the_grace_period_abandons_the_write_cleanly(tmp_path: Path) -> None:
    root = tmp_path / "root"
    server = start_server(str(root), tmp_path / "server.log", RECORDS_DESTINATION_GRACE_SECONDS="0.2")
    try:
        wait_for(lambda: server.health() == SERVING, "SERVING", server)
        stub = server.stub()
        assert stub.CreateTable(sdk.CreateTableRequest(schema_name="s", table=T)).success
        # version 2 holds the table's file; version 3 appends new keys and must carry that file forward
        assert stub.WriteBatch(_request(_batch(tmp_path, "all", list(range(2000)))), timeout=600).success
        caller, _outcome = _in_flight(server, _request(_batch(tmp_path, "one", list(range(10_000, 210_000)))))
        claim = root / layout.claim_path(layout.table_prefix("s", "orders"), 3)
        wait_for(claim.exists, "the write claiming version 3", server)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(300) == 0
        caller.join(60)
    finally:
        server.stop()
    messages = server.messages()
    assert len([m for m in messages if "write abandoned" in m["message"]]) == 1, messages
    assert not [m for m in messages if m["level"] == "SEVERE"], messages
    assert _version(root) == 2  # nothing of version 3 is visible
    assert len(rows_of({"root": str(root)}, "s", "orders")) == 2000
