"""Batch files staged in the table root's storage for executors that cannot read the server's disk
(destination/write/staging.py), on both backends: tasks decode the staged copy, and the staging directory is gone
after the write, after a failure, and (swept) after a server that died."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from destination.model.table_model import ColumnDef, TableDef
from destination.storage.base import Storage
from destination.write.batches import plan_batch
from destination.write.staging import STAGING_DIR, STALE_SECONDS, request_directory, staged, staged_for_executors
from spark_jobs.operations import file_operations
from tests.batchfiles import FMT, write_csv

KEY = bytes(range(32))
COLUMNS = ["id", "v", "_fivetran_synced", "_fivetran_deleted"]
DEFINITION = TableDef("t", (ColumnDef("id", "INT", True), ColumnDef("v", "STRING"),
                            ColumnDef("_fivetran_synced", "UTC_DATETIME"), ColumnDef("_fivetran_deleted", "BOOLEAN")))


def batch_file(folder: Path, name: str, rows: int) -> Path:
    folder.mkdir(exist_ok=True)
    return write_csv(folder / name, COLUMNS, [{"id": str(i), "v": f"v{i}", "_fivetran_synced": "2024-01-01T00:00:00Z",
                                               "_fivetran_deleted": "false"} for i in range(rows)], KEY)


def staged_names(storage: Storage) -> list[str]:
    return [o.path for o in storage.list_recursive(STAGING_DIR)]


def test_tasks_decode_the_staged_copy_which_is_gone_after_the_write(tmp_path: Path, storage: Storage) -> None:
    # two files of the same name in two folders: staged copies must not collide
    first, second = batch_file(tmp_path / "a", "rows.csv.zstd.aes", 10), batch_file(tmp_path / "b", "rows.csv.zstd.aes", 7)
    plan = plan_batch({"replace": [str(first)], "update": [str(second)]}, {str(first): KEY, str(second): KEY}, FMT)
    with staged(plan, storage) as staged_plan:
        assert staged_plan.identity == plan.identity and staged_plan.total_bytes == plan.total_bytes
        copies = staged_names(storage)
        assert len(copies) == 2
        for ref, original in zip(staged_plan.files, (first, second), strict=True):
            assert ref.staged is not None and ref.path == str(original)
            assert storage.read_bytes(ref.staged.path) == original.read_bytes()  # as sent: still encrypted
        moved = {p: p.read_bytes() for p in (first, second)}
        for p in moved:
            p.unlink()  # an executor on another machine cannot read the server's disk
        assert [file_operations(DEFINITION, ref, FMT).rows for ref in staged_plan.files] == [10, 7]
        for p, data in moved.items():
            p.write_bytes(data)
    assert staged_names(storage) == []


def test_the_staging_directory_is_removed_after_a_failure(tmp_path: Path, storage: Storage) -> None:
    path = batch_file(tmp_path, "f.csv.zstd.aes", 3)
    plan = plan_batch({"replace": [str(path)]}, {str(path): KEY}, FMT)
    with pytest.raises(RuntimeError, match="the job failed"), staged(plan, storage):
        assert len(staged_names(storage)) == 1
        raise RuntimeError("the job failed")
    assert staged_names(storage) == []


def test_directories_of_writes_that_never_finished_are_swept_when_stale(tmp_path: Path, storage: Storage) -> None:
    now = time.time()
    stale = request_directory(now - STALE_SECONDS - 60)  # a server died during this write a day ago
    recent = request_directory(now - 60)  # another server's write in flight
    for name in (stale, recent, "not-a-request"):
        storage.write_bytes(f"{STAGING_DIR}/{name}/00000", b"bytes")
    path = batch_file(tmp_path, "f.csv.zstd.aes", 3)
    with staged(plan_batch({"replace": [str(path)]}, {str(path): KEY}, FMT), storage, now=now):
        pass
    left = {p.split("/")[2] for p in staged_names(storage)}
    assert left == {recent, "not-a-request"}


def test_local_mode_reads_the_servers_disk(tmp_path: Path, storage: Storage) -> None:
    path = batch_file(tmp_path, "f.csv.zstd.aes", 3)
    plan = plan_batch({"replace": [str(path)]}, {str(path): KEY}, FMT)
    with staged_for_executors(plan, storage, "local[2]") as same:
        assert same is plan and staged_names(storage) == []
    with staged_for_executors(plan, storage, "spark://127.0.0.1:7077") as moved:
        assert moved.files[0].staged is not None and len(staged_names(storage)) == 1
