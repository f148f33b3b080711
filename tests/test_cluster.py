"""Scale-out on a real Spark standalone cluster (issue 18 §6): a master and two workers on 127.0.0.1, whose executors
run in JVMs of their own, serve a `records-destination serve` process. A merge into a table of more data files
than the old 16 buckets gives, row for row, the table the same requests give in local mode; it runs one task per
data file it touches; the batch files reach the executors as copies staged in the table's storage, removed after
the write and after a failed one."""
from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from destination.protocol import sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.write.staging import STAGING_DIR
from testbed.processes import children, command_line
from testbed.sparkcluster import EXECUTOR, SparkCluster, start_cluster
from tests.batchfiles import write_csv
from tests.conftest import spec_of
from tests.rpc_helpers import rows_of, table
from tests.serverproc import SERVING, ServerProcess, spark_jvm, start_server, wait_for
from tests.test_write_path import KEY, SYS, U, create, params

pytestmark = pytest.mark.serve  # every test here starts a `serve` process

COLUMNS = [("id", "INT", True), ("s", "STRING"), ("n", "LONG"), *SYS]
NAMES = [c[0] for c in COLUMNS]
TARGET_FILE_SIZE = "256KiB"  # the data files' target size: the table holds more files than the old 16 buckets
LOADED = 80_000  # rows of 200 random hex characters: about 9 MB of Parquet, some 35 files of the target size
SYNCED = "2024-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def cluster_server(spark_cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[ServerProcess, Path]]:
    """A server whose Spark master is the cluster (every request decoded in Spark tasks), and its event log."""
    directory = tmp_path_factory.mktemp("cluster-server")
    events = directory / "events"
    server = start_server(str(directory / "root"), directory / "server.log", spark_master=spark_cluster.url,
                          SPARK_LOCAL_IP="127.0.0.1", RECORDS_DESTINATION_SPARK_EVENT_LOG=str(events),
                          RECORDS_DESTINATION_SMALL_REQUEST_BYTES="0")
    wait_for(lambda: server.health() == SERVING, "the server SERVING on the cluster", server)
    yield server, events
    server.stop()


def rows(ids: range | list[int], rng: random.Random, **fixed: str) -> list[dict[str, str]]:
    return [{"id": str(i), "s": fixed.get("s") or rng.randbytes(100).hex(), "n": fixed.get("n") or str(i * 7),
             "_fivetran_synced": SYNCED, "_fivetran_deleted": "false"} for i in ids]


def batch_files(folder: Path) -> tuple[dict[str, list[Path]], dict[str, list[Path]]]:
    """(the load: four files of inserts, the merge: upserts and new keys, updates of one column, deletes), spread
    over the whole key range so that the merge touches every data file."""
    rng = random.Random(18)
    load = {"replace": [write_csv(folder / f"load-{k}.csv.zstd.aes", NAMES, rows(range(k, LOADED, 4), rng), KEY)
                        for k in range(4)]}
    merge = {"replace": [write_csv(folder / "upsert.csv.zstd.aes", NAMES,
                                   rows([*range(0, LOADED, 10), *range(LOADED, LOADED + 2000)], rng), KEY)],
             "update": [write_csv(folder / "update.csv.zstd.aes", NAMES, rows(range(5, LOADED, 20), rng, s=U), KEY)],
             "delete": [write_csv(folder / "delete.csv.zstd.aes", NAMES, rows(range(7, LOADED, 37), rng), KEY)]}
    return load, merge


def write(stub: Any, configuration: dict[str, str], name: str, files: dict[str, list[Path]]) -> Any:
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name="scale", table=table(name, COLUMNS),
                                    file_params=params())
    for kind, paths in files.items():
        for path in paths:
            getattr(request, f"{kind}_files").append(str(path))
            request.keys[str(path)] = KEY
    return stub.WriteBatch(request)


def events_of(directory: Path, jobs: int) -> list[dict[str, Any]]:
    """The event log once it shows at least `jobs` jobs ended and none running: Spark's listener bus writes it
    after the job has returned to the driver."""
    deadline = time.monotonic() + 30
    while True:
        events = []
        files = sorted(directory.rglob("events_*"), key=lambda p: int(p.name.split("_")[1]))  # eventlog_v2_*/events_N_*
        for line in (line for f in files for line in f.read_text().splitlines()):
            try:
                events.append(json.loads(line))
            except ValueError:  # a line still being written
                break
        kinds = [e.get("Event") for e in events]
        if jobs <= kinds.count("SparkListenerJobEnd") == kinds.count("SparkListenerJobStart"):
            return events
        assert time.monotonic() < deadline, f"the event log never showed {jobs} jobs ended"
        time.sleep(0.2)


def job_ends(events: list[dict[str, Any]]) -> int:
    return sum(1 for event in events if event.get("Event") == "SparkListenerJobEnd")


def tasks_by_stage(events: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Stage id → the executor id of each of its finished tasks."""
    stages: dict[int, list[str]] = {}
    for event in events:
        if event.get("Event") == "SparkListenerTaskEnd":
            stages.setdefault(event["Stage ID"], []).append(event["Task Info"]["Executor ID"])
    return stages


def staged(configuration: dict[str, str]) -> list[str]:
    return [o.path for o in open_storage(spec_of(configuration)).list_recursive(STAGING_DIR)]


def test_a_merge_on_the_cluster_equals_local_mode(configuration: dict[str, str], stub: Any, through_spark_tasks: None,
                                                  spark_cluster: SparkCluster,
                                                  cluster_server: tuple[ServerProcess, Path], tmp_path: Path) -> None:
    server, event_log = cluster_server
    local = {**configuration, "target_file_size": TARGET_FILE_SIZE}
    clustered = {**local, "root": configuration["root"] + "-cluster"}
    load, merge = batch_files(tmp_path)
    for target, conf in ((stub, local), (server.stub(), clustered)):
        create(target, conf, "scale", table("t", COLUMNS))
        assert write(target, conf, "t", load).WhichOneof("response") == "success"
    store = TableStore(open_storage(spec_of(clustered)))
    base = store.load("scale", "t")
    assert base is not None
    events = events_of(event_log, jobs=1)
    jobs_before, stages_before = job_ends(events), set(tasks_by_stage(events))

    for target, conf in ((stub, local), (server.stub(), clustered)):
        answer = write(target, conf, "t", merge)
        assert answer.WhichOneof("response") == "success", answer
    assert staged(clustered) == []  # removed after the commit
    written = [m["message"] for m in server.messages() if m["message"].startswith("[WriteBatch] scale.t")]
    assert "staging" in written[-1], written  # the files reached the executors staged

    by_id = sorted(rows_of(clustered, "scale", "t"), key=lambda row: row["id"])
    assert by_id == sorted(rows_of(local, "scale", "t"), key=lambda row: row["id"])
    assert len(by_id) == LOADED + 2000 - len(range(7, LOADED, 37))

    # the tasks ran in the executors' JVMs, one per worker, none of them the server's
    merge_stages = {sid: executors for sid, executors in tasks_by_stage(events_of(event_log, jobs_before + 1)).items()
                    if sid not in stages_before}
    assert merge_stages and all("driver" not in executors for executors in merge_stages.values())
    jvms = spark_cluster.executor_jvms()
    assert [len(pids) for pids in jvms.values()] == [1, 1], jvms
    server_jvm = spark_jvm(server.process.pid)
    assert server_jvm is not None and not any(EXECUTOR in command_line(pid) for pid in children(server_jvm))

    # a failed write removes its staged files too: a truncated file fails in the task that decodes it
    bad = tmp_path / "bad.csv.zstd.aes"
    bad.write_bytes(merge["replace"][0].read_bytes()[:-5])  # truncated: not a whole number of AES blocks
    with pytest.raises(grpc.RpcError) as refused:
        write(server.stub(), clustered, "t", {"replace": [bad]})
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bad.csv.zstd.aes" in refused.value.details()
    assert staged(clustered) == []

    # one task per unit: the merge's last stage ran one task per key range it planned (the write's log line counts
    # them), more than the old 16 buckets, and the files it rewrote are those units' files
    merged = store.load("scale", "t")
    assert merged is not None and merged.version == base.version + 1
    touched = {f.name for f in base.files} - {f.name for f in merged.files}
    units = int(re.search(r"'units': (\d+)", written[-1]).group(1))  # type: ignore[union-attr]
    rewritten = int(re.search(r"'files_rewritten': (\d+)", written[-1]).group(1))  # type: ignore[union-attr]
    merge_tasks = len(merge_stages[max(merge_stages)])
    assert merge_tasks == units > 16 and rewritten == len(touched) > 16, (
        f"the merge ran {merge_tasks} tasks for {units} units and rewrote {len(touched)} of the base's "
        f"{len(base.files)} data files")
