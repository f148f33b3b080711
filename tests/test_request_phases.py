"""The per-request phase times (destination/runtime/phases.py): the recorder's arithmetic against a clock the test drives,
and the `phases` field of a real WriteBatch's log line through the gRPC server."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from bench.batches import write_batch_file
from bench.data import COLUMNS, KEY, Pools, column_names, plain_rows, system_columns, text_table
from destination.protocol import sdk
from destination.runtime import phases
from destination.table_formats.version import FormatLog
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from destination.write.one_step import commit_one_step
from tests.rpc_helpers import table


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(phases.time, "perf_counter", fake)
    return fake


@pytest.mark.unit
def test_nested_phases_count_once_and_handed_time_leaves_the_running_phase(clock: FakeClock) -> None:
    with phases.recording() as recorder, phases.timed("retention"):
        clock.now += 1.0
        with phases.timed("delta"):
            clock.now += 2.0
            with phases.timed("change_files"):
                clock.now += 0.5
            clock.now += 0.25
        clock.now += 4.0  # the Spark job's 4 s, split below by its tasks' clock
        phases.add({"spark_scheduling": 1.0, "tasks": 2.5, "spark_results": 0.5})
        clock.now += 0.125
    assert recorder.seconds == {"retention": 1.125, "delta": 2.25, "change_files": 0.5, "spark_scheduling": 1.0,
                                "tasks": 2.5, "spark_results": 0.5}
    assert sum(recorder.seconds.values()) == pytest.approx(7.875)  # the block's wall time, once


@pytest.mark.unit
def test_spark_job_split_by_task_spans_clamped_to_the_job() -> None:
    with phases.recording() as recorder:
        phases.spark_job(10.0, [(10.5, 11.0), (10.75, 12.0)], 12.25)
        phases.spark_job(20.0, [(19.0, 25.0)], 21.0)  # another host's clock: clamped into the job
    assert recorder.seconds == pytest.approx({"spark_scheduling": 0.5, "tasks": 1.5 + 1.0, "spark_results": 0.25})


@pytest.mark.unit
def test_outside_a_request_hooks_do_nothing_and_unknown_names_are_refused() -> None:
    with phases.timed("delta"):
        phases.add({"tasks": 1.0})
    with phases.recording(), pytest.raises(ValueError, match="unknown phase 'parsing'"), phases.timed("parsing"):
        pass


def _lines(captured: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in captured.splitlines() if line.startswith("{")]


def test_write_batch_log_line_carries_its_phases(stub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), "table_formats": "delta,iceberg"}
    columns = [(name, kind, name == KEY, params) for name, kind, params in COLUMNS]
    definition = table("t", [*columns, *system_columns(False)])
    assert stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="phases",
                                                   table=definition)).success
    rows = text_table(plain_rows(np.arange(200, dtype=np.int64), 1, Pools.make(), "2024-06-01T00:00:00Z"),
                      column_names(False))
    batch = write_batch_file(tmp_path, "sync", rows, "replace", "csv")
    capsys.readouterr()
    observed = {name: _observed(name) for name in phases.PHASES}
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name="phases", table=definition,
                                    file_params=sdk.FileParams(compression=sdk.Compression.Value("ZSTD"),
                                                               encryption=sdk.Encryption.Value("AES"),
                                                               null_string=NULL_STRING,
                                                               unmodified_string=UNMODIFIED_STRING),
                                    replace_files=[batch.path], keys={batch.path: batch.key})
    assert stub.WriteBatch(request).success
    lines = [line for line in _lines(capsys.readouterr().out)
             if str(line["message"]).startswith("[WriteBatch] phases.t: 200 rows")]
    assert len(lines) == 1, lines
    line = lines[0]
    spent = line["phases"]
    assert isinstance(spent, dict)
    assert {"load", "decode", "spark_scheduling", "tasks", "commit", "metadata", "retention", "delta",
            "iceberg"} <= set(spent), spent
    assert set(spent) <= set(phases.PHASES)
    assert all(isinstance(v, float) and v >= 0 for v in spent.values())
    seconds = line["seconds"]
    assert isinstance(seconds, float)
    assert sum(spent.values()) <= seconds + 1e-3  # rounded to 0.1 ms each
    # the message's time (ms) and the field (0.1 ms) are rounded apart: 0.07551 s is "0.076s" and 0.0755
    shown = re.fullmatch(r".* in (\d+\.\d{3})s", str(line["message"]))
    assert shown is not None and abs(float(shown.group(1)) - seconds) <= 0.0006, (line["message"], seconds)
    # the histogram took one observation per phase the line gives (other requests' may run beside it)
    assert all(_observed(name) >= observed[name] + 1 for name in spent)


def _observed(phase: str) -> float:
    return REGISTRY.get_sample_value("records_destination_request_phase_seconds_count", {"phase": phase}) or 0.0


class _SleepingFormat:
    """A table format that takes `seconds` to commit and logs a line as it does."""

    folders: tuple[str, ...] = ()

    def __init__(self, name: str, seconds: float, reads_change_data: bool) -> None:
        self.name, self.seconds, self.reads_change_data = name, seconds, reads_change_data

    def log(self, storage: object, prefix: str) -> FormatLog:
        return FormatLog((), ())

    def commit(self, storage: object, prefix: str, version: object, oldest_retained: int,
               log: FormatLog | None = None) -> None:
        import time

        from destination.runtime import logs

        logs.info(f"{self.name} committing")
        time.sleep(self.seconds)


@pytest.mark.unit
def test_formats_beside_the_request_are_timed_by_the_wait_for_them_and_log_for_its_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Iceberg commits in a pool thread beside Delta: the request's `iceberg` phase holds the time it waited for it
    after Delta's commit (not the enclosing `retention`), and the pool thread logs with the request's fields."""
    from destination.runtime import logs
    from destination.storage.base import StorageSpec
    from destination.storage.opening import open_storage
    from destination.store.table_store import TableStore
    from destination.table_formats.sync import TableFormatPublisher
    from tests.test_table_store import SCHEMA, appender

    storage = open_storage(StorageSpec(root=str(tmp_path)))
    committed = commit_one_step(TableStore(storage), SCHEMA, "events", appender(storage, 0))
    assert committed is not None
    delta, iceberg = _SleepingFormat("delta", 0.05, True), _SleepingFormat("iceberg", 0.4, False)
    store = TableStore(storage)
    capsys.readouterr()
    with logs.request_scope(SCHEMA, "events"), phases.recording() as recorder, phases.timed("retention"):
        assert TableFormatPublisher([iceberg, delta])(store, committed.prefix, committed, 1)
    assert recorder.seconds["iceberg"] >= 0.25, recorder.seconds
    assert recorder.seconds["delta"] < recorder.seconds["iceberg"]
    assert recorder.seconds["retention"] < 0.2, recorder.seconds
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "committing" in line]
    assert sorted(line["message"] for line in lines) == ["delta committing", "iceberg committing"]
    assert all(line["schema"] == SCHEMA and line["table"] == "events" for line in lines), lines
