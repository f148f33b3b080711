"""Many requests, one Spark job (destination/write/coalescer.py): WriteBatch calls for different tables that wait
for Spark together run in one job, and each still ends on its own: one failing in its Spark task, one cancelled by
the client while it waits, one re-sent by the client; the others commit exactly once. The number of Spark jobs is
read from Spark itself (its job ids are one sequence per context), not from the coalescer."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
from pyspark.sql import SparkSession

from destination.on_disk import layout
from destination.protocol import sdk
from destination.runtime.errors import BadBatchFile
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.store.versions import PendingVersion
from destination.write.coalescer import Coalescer
from destination.write.one_step import commit_one_step
from destination.write.runner import COALESCER, _run_coalesced_job
from spark_jobs.boundary import run_unit
from spark_jobs.contracts import JobContext
from tests.batchfiles import write_csv
from tests.rpc_helpers import rows_of, table
from tests.test_write_path import KEY, SYS, create, params, r

SCHEMA = "coalesced"
COLUMNS = [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS]


# ---- task functions (module level: Spark's workers import them) ----------------------------------------------

def wait_for_file(ctx: JobContext, flag: str) -> int:
    """Hold a Spark task (and the coalescer's slot of its job) until the test creates `flag`."""
    deadline = time.monotonic() + 120
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return 0


def doubled_or_bad(ctx: JobContext, unit: int) -> int:
    if unit < 0:
        raise BadBatchFile(f"/in/{-unit}.csv", "corrupt")
    return unit * 2


# ---- helpers ---------------------------------------------------------------------------------------------------

def last_job_id(spark: SparkSession) -> int:
    """The id Spark gives a job started now (ids count every job of the context, whoever started it)."""
    sc = spark.sparkContext
    group = f"probe-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "probe")
    try:
        sc.parallelize([0], 1).count()
        return max(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setJobGroup(f"after-{group}", "")


def _context(tmp_path: Path) -> JobContext:
    return JobContext(storage=StorageSpec(root=str(tmp_path)), base_dir=None, target_dir="", table=table("t", COLUMNS),
                      version=1, changes=None, target_file_bytes=1 << 20, scratch=None)


@contextmanager
def slots_held(coalescer: Coalescer, spark: SparkSession, ctx: JobContext, flag: Path) -> Iterator[None]:
    """Every slot of `coalescer` busy with a Spark job that waits for `flag`: what is submitted meanwhile queues."""
    with ThreadPoolExecutor(coalescer.max_running) as pool:
        holders = [pool.submit(coalescer.run, spark, partial(run_unit, wait_for_file, ctx), [str(flag)], f"hold {i}")
                   for i in range(coalescer.max_running)]
        try:
            _eventually(lambda: coalescer.running() == coalescer.max_running, "every slot held")
            yield
        finally:
            flag.touch()
            for holder in holders:
                holder.result(timeout=120)


def _eventually(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.02)


# ---- the coalescer on its own, with real Spark -----------------------------------------------------------------

def test_queued_submissions_share_one_job_and_keep_their_own_results(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    coalescer = Coalescer(_run_coalesced_job, max_running=1)
    ctx = _context(tmp_path)
    before = last_job_id(spark)
    with ThreadPoolExecutor(3) as pool:
        with slots_held(coalescer, spark, ctx, tmp_path / "go"):
            futures = [pool.submit(coalescer.run, spark, partial(run_unit, doubled_or_bad, ctx), units, "sum")
                       for units in ([1, 2, 3], [-7, 4], [10])]
            _eventually(lambda: coalescer.queued() == 3, "three submissions queued")
        outcomes = [f.result(timeout=120) for f in futures]
    after = last_job_id(spark)
    assert after - before - 1 == 2  # the holder's job, then the three submissions' one job
    assert [[result for result, _s, _e in outcome] for outcome in outcomes[::2]] == [[2, 4, 6], [20]]
    failed = [result for result, _s, _e in outcomes[1]]
    assert failed[1] == 8 and type(failed[0]).__name__ == "TaskFailure" and "corrupt" in failed[0].message


# ---- through the server ----------------------------------------------------------------------------------------

def _request(configuration: dict[str, str], name: str, folder: Path, keys: range, value: str) \
        -> sdk.WriteBatchRequest:
    t = table(name, COLUMNS)
    path = write_csv(folder / f"{name}-{value}.csv.zstd.aes", [c.name for c in t.columns],
                     [r(k, value) for k in keys], KEY)
    return sdk.WriteBatchRequest(configuration=configuration, schema_name=SCHEMA, table=t, file_params=params(),
                                 replace_files=[str(path)], keys={str(path): KEY})


def _version(store: TableStore, name: str) -> int:
    latest = store.load(SCHEMA, name)
    assert latest is not None
    return latest.version


def test_coalesced_requests_fail_cancel_and_retry_on_their_own(stub, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "root"
    configuration = {"root": str(root)}
    names = ["ok1", "ok2", "ok3", "bad", "cancelled", "retried", "again"]
    waves = names[:6]
    for name in names:
        create(stub, configuration, SCHEMA, table(name, COLUMNS))
    store = TableStore(open_storage(StorageSpec(root=str(root))))
    again = _request(configuration, "again", tmp_path, range(0, 5), "first")
    assert stub.WriteBatch(again).WhichOneof("response") == "success"  # committed: its re-send must change nothing
    blocked = root / layout.version_dir(layout.table_prefix(SCHEMA, "bad"), 2)
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_bytes(b"")  # the folder version 2's data files go into is a file: its Spark task fails
    wave = {name: _request(configuration, name, tmp_path, range(10 * i, 10 * i + 8), "wave")
            for i, name in enumerate(waves)}
    ctx = _context(tmp_path)
    before = last_job_id(spark)
    with ThreadPoolExecutor(len(names)) as pool:
        with slots_held(COALESCER, spark, ctx, tmp_path / "go"):
            answers = {name: stub.WriteBatch.future(request) for name, request in wave.items()}
            _eventually(lambda: COALESCER.queued() == 6, "six requests waiting for Spark, each holding its claim")
            answers["cancelled"].cancel()
            _eventually(lambda: COALESCER.queued() == 5, "the cancelled request withdrawn")
            # a concurrent writer (lease run out) takes `retried`'s version 2 over and commits it: that request's
            # commit conflicts after its job, and it redoes its work on version 2, in a later job
            taker = TableStore(open_storage(StorageSpec(root=str(root))), claim_lease_seconds=0.0)
            taken = commit_one_step(taker, SCHEMA, "retried", lambda base, target: PendingVersion(
                base.table, [], list(base.files), {"kind": "concurrent"}) if base else None)
            assert taken is not None and taken.version == 2
            resent = pool.submit(stub.WriteBatch, again)
        results = {name: answer.result(timeout=120) for name, answer in answers.items() if name != "cancelled"}
        assert resent.result(timeout=120).WhichOneof("response") == "success"
    after = last_job_id(spark)
    jobs = after - before - 1 - COALESCER.max_running  # besides the holders' jobs
    assert jobs < 5, f"five requests' Spark work (one of them twice) ran in {jobs} jobs"
    for name in ("ok1", "ok2", "ok3"):
        assert results[name].WhichOneof("response") == "success", results[name]
        assert _version(store, name) == 2  # CreateTable, then exactly one commit
    assert results["bad"].WhichOneof("response") == "task" and blocked.name in results["bad"].task.message
    assert _version(store, "bad") == 1
    with pytest.raises(grpc.FutureCancelledError):
        answers["cancelled"].result()
    assert _version(store, "cancelled") == 1  # withdrawn before its job: nothing of it committed
    assert _version(store, "again") == 2  # the re-sent request was recognised, not written again
    assert results["retried"].WhichOneof("response") == "success", results["retried"]
    assert _version(store, "retried") == 3  # the concurrent writer's version, then the request's one commit
    # the client retries the cancelled request: it commits once, as a request of its own
    assert stub.WriteBatch(wave["cancelled"]).WhichOneof("response") == "success"
    assert _version(store, "cancelled") == 2
    expected: dict[str, list[tuple[Any, ...]]] = {
        name: [(k, "wave") for k in range(10 * i, 10 * i + 8)] for i, name in enumerate(waves)}
    expected["bad"] = []
    expected["again"] = [(k, "first") for k in range(0, 5)]
    for name in names:
        got = sorted((row["id"], row["v"]) for row in rows_of(configuration, SCHEMA, name))
        assert got == expected[name], name
