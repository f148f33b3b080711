"""A real `records-destination serve` process killed at each step of `_log/`'s pruning (RECORDS_DESTINATION_EXIT_AT,
destination/store/table_store.py): after a restart the table loads at its latest version, needs no repair, validates,
takes the next write, and the readers (records files, delta-rs, pyiceberg, DuckDB) read every retained version with
the rows written."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from destination.commands.validator import validate_table
from destination.on_disk import layout
from destination.on_disk.options import MIN_AGE_FIELD, VERSIONS_FIELD, Retention
from destination.protocol import sdk
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
from destination.store.log_pruning import PRUNING_STEPS
from destination.store.table_store import EXIT_AT_CODE, EXIT_AT_ENV, TableStore
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from tests.lake_readers import delta_duckdb, delta_rs, iceberg_pyiceberg_as_of
from tests.serverproc import SERVING, start_server, wait_for
from tests.test_faults_server import KEY, T, _batch
from tests.test_log_pruning import read_records

pytestmark = pytest.mark.serve  # every test here starts a `serve` process

RETENTION = Retention(keep_versions=2, min_age_seconds=0)
CONFIGURATION = {VERSIONS_FIELD: "2", MIN_AGE_FIELD: "0"}


def _write(stub: Any, path: Path) -> Any:
    return stub.WriteBatch(sdk.WriteBatchRequest(
        configuration=CONFIGURATION, schema_name="s", table=T, replace_files=[str(path)], keys={str(path): KEY},
        file_params=sdk.FileParams(compression=1, encryption=1, null_string=NULL_STRING,
                                   unmodified_string=UNMODIFIED_STRING)), timeout=600)


def _ids(table: Any) -> list[int]:
    return sorted(table.column("id").to_pylist())


@pytest.mark.parametrize("step", PRUNING_STEPS)
def test_a_server_killed_at_each_step_of_the_pruning_recovers_on_restart(tmp_path: Path, step: str) -> None:
    root = tmp_path / "root"
    server = start_server(str(root), tmp_path / "killed.log", **{EXIT_AT_ENV: step})
    try:
        wait_for(lambda: server.health() == SERVING, "SERVING", server)
        assert server.stub().CreateTable(sdk.CreateTableRequest(configuration=CONFIGURATION, schema_name="s",
                                                                table=T)).success  # version 1
        assert _write(server.stub(), _batch(tmp_path, "first", list(range(50)))).success  # version 2
        with pytest.raises(grpc.RpcError):  # version 3 retires version 1: its pruning ends the process
            _write(server.stub(), _batch(tmp_path, "second", list(range(50, 100))))
        assert server.process.wait(60) == EXIT_AT_CODE, server.log.read_text()
    finally:
        server.stop()
    storage = open_storage(StorageSpec(root=str(root)))
    prefix = layout.table_prefix("s", "orders")
    store = TableStore(storage, RETENTION)
    latest = store.load("s", "orders")
    assert latest is not None and latest.version == 3, "the version committed before its pruning stands"
    assert store.repair("s", "orders") is None
    assert validate_table(storage, "s", "orders", RETENTION) == []
    restarted = start_server(str(root), tmp_path / "restarted.log")
    try:
        wait_for(lambda: restarted.health() == SERVING, "SERVING", restarted)
        assert _write(restarted.stub(), _batch(tmp_path, "third", list(range(100, 150)))).success  # version 4
    finally:
        restarted.stop()
    assert validate_table(storage, "s", "orders", RETENTION) == []
    records = sorted(n for n in storage.list_children(f"{prefix}/_log") if n[0].isdigit())
    assert records == [f"{n:020d}.json" for n in (3, 4)], "the pruning cut short was finished by the next one"
    url = storage.url(prefix)
    for n, ids in ((3, list(range(100))), (4, list(range(150)))):
        version = TableStore(storage).load("s", "orders", n)
        assert version is not None
        assert _ids(read_records(storage, version, ("id",))) == ids, f"records v{n}"
        assert _ids(delta_rs(storage.spec, url, n)) == ids, f"delta-rs v{n}"
        assert _ids(delta_duckdb(storage.spec, url, n)) == ids, f"duckdb v{n}"
        assert _ids(iceberg_pyiceberg_as_of(storage.spec, url, n)) == ids, f"pyiceberg v{n}"
