"""Errors across the driver/task boundary: a task's own error reaches the driver as itself (class and fields),
any other exception as an INTERNAL error, both chained to where the task raised them; storage backends turn their
library's errors into the documented StorageError, so a data file that cannot be written is a Task."""
from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk import layout
from destination.protocol import sdk
from destination.runtime.errors import BadBatchFile, DestinationError, RefusedChange, StorageError, UserActionRequired
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
from destination.write.runner import TaskFailed, TaskTrace, run_shuffled, run_units
from spark_jobs.contracts import JobContext
from tests.batchfiles import write_csv
from tests.conftest import s3_configuration, spec_of
from tests.rpc_helpers import table
from tests.test_write_path import KEY, SYS, create, params, r


def test_our_errors_pickle_with_their_class_and_fields() -> None:
    bad = pickle.loads(pickle.dumps(BadBatchFile("/in/f.csv", "bad padding")))
    assert type(bad) is BadBatchFile and (bad.path, bad.cause, str(bad)) == ("/in/f.csv", "bad padding",
                                                                              "batch file '/in/f.csv': bad padding")
    refused = pickle.loads(pickle.dumps(RefusedChange("would lose values", "id=7")))
    assert type(refused) is RefusedChange and refused.task_message == "would lose values. Example row: key id=7"


# ---- task functions (module level: Spark's workers import them) ----------------------------------------------

def raises_bad_file(ctx: JobContext, unit: str) -> int:
    if unit == "bad":
        raise BadBatchFile("/in/bad.csv.zst", "corrupt or truncated data")
    return len(unit)


def raises_key_error(ctx: JobContext, unit: str) -> int:
    return {"a": 1}[unit]


def maps_then_fails(ctx: JobContext, unit: str) -> Iterator[tuple[int, str]]:
    yield 1, unit
    raise BadBatchFile(f"/in/{unit}", "not a readable Parquet file")


def counts(ctx: JobContext, key: int, payloads: list[str]) -> int:
    return len(payloads)


def _context(tmp_path: Path) -> JobContext:
    return JobContext(storage=StorageSpec(root=str(tmp_path)), base_dir=None, target_dir="t",
                      table=TableDef("t", (ColumnDef("id", "INT", True),)), version=1)


def test_a_tasks_own_error_reaches_the_driver_as_itself(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx = _context(tmp_path)
    assert run_units(spark, raises_bad_file, ctx, ["ok", "fine"], "test") == [2, 4]
    with pytest.raises(BadBatchFile) as raised:
        run_units(spark, raises_bad_file, ctx, ["ok", "bad"], "test")
    assert raised.value.path == "/in/bad.csv.zst" and raised.value.cause == "corrupt or truncated data"
    trace = raised.value.__cause__
    assert isinstance(trace, TaskTrace) and "BadBatchFile" in str(trace) and "raises_bad_file" in str(trace)


def test_any_other_exception_of_a_task_is_internal_not_a_task_for_the_user(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DestinationError) as raised:
        run_units(spark, raises_key_error, _context(tmp_path), ["a", "b"], "test")
    assert type(raised.value) is TaskFailed and not isinstance(raised.value, UserActionRequired)
    assert "KeyError" in str(raised.value)
    assert isinstance(raised.value.__cause__, TaskTrace) and "raises_key_error" in str(raised.value.__cause__)


def test_a_map_tasks_error_crosses_the_shuffle(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BadBatchFile) as raised:
        run_shuffled(spark, maps_then_fails, counts, _context(tmp_path), ["x.parquet"], 2, "test")
    assert raised.value.path == "/in/x.parquet"


@pytest.fixture(params=["local", "s3"])
def unwritable(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[StorageSpec, str]:
    """A root and a path in it that cannot be written: below a regular file (local), with a wrong secret (S3)."""
    if request.param == "local":
        (tmp_path / "root").mkdir()
        (tmp_path / "root" / "taken").write_bytes(b"a file, not a folder")
        return StorageSpec(root=str(tmp_path / "root")), "taken/data.parquet"
    configuration = s3_configuration(request.getfixturevalue("s3_server"), "p")
    return spec_of({**configuration, "aws_secret_access_key": "not-the-secret"}), "data.parquet"


def test_storage_turns_library_errors_into_storage_errors(unwritable: tuple[StorageSpec, str]) -> None:
    spec, path = unwritable
    storage = open_storage(spec)
    with pytest.raises(StorageError) as raised, storage.open_output(path) as sink:
        sink.write(b"x" * 1024)
    assert storage.url(path) in str(raised.value) and isinstance(raised.value.__cause__, OSError)
    assert "not-the-secret" not in str(raised.value)


def test_a_data_file_that_cannot_be_written_is_a_task(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An OSError while a Spark task writes a data file (here: its version's folder is a file) answers a Task
    naming the file, not INTERNAL."""
    root = tmp_path / "root"
    configuration = {"root": str(root)}
    t = table("t", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "errors", t)
    blocked = root / layout.version_dir(layout.table_prefix("errors", "t"), 2)
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_bytes(b"")  # the folder version 2's data files go into is a file
    answer = _write(stub, configuration, t, tmp_path)
    assert answer.WhichOneof("response") == "task", answer
    assert "write of file://" in answer.task.message and blocked.name in answer.task.message


def _write(stub, configuration, t, tmp_path):  # type: ignore[no-untyped-def]
    path = write_csv(tmp_path / "rows.csv.zstd.aes", [c.name for c in t.columns], [r(1, "a")], KEY)
    return stub.WriteBatch(sdk.WriteBatchRequest(configuration=configuration, schema_name="errors", table=t,
                                                 replace_files=[str(path)], keys={str(path): KEY},
                                                 file_params=params()))
