"""Driver memory for a large request on a Spark standalone cluster (not a test; issue 18 §6).

Starts a master and two workers on 127.0.0.1 (testbed/sparkcluster.py), a `serve` process whose Spark master is that
cluster, writes `--files` encrypted batch files of about `--gb` GB in total, and sends them as ONE WriteBatch into a
table that already holds rows (the shuffled path: one decode task per file). The server process and its Spark
driver JVM are sampled every 100 ms (bench/server.py's MemorySampler); the executors are not part of it.

`--source DIR` runs another checkout of the code (e.g. `git archive` of an older commit, with the generated
protocol stubs copied in) to compare; the cluster's Python workers import the same checkout.

    python -m bench.cluster_memory --gb 2 --files 20 --backend s3 [--source DIR] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.csv as pacsv

from bench.server import MAX_MESSAGE, MemorySampler, free_port
from destination.protocol import common, sdk, sdk_grpc
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING, seal

KEY = bytes(range(32))
COLUMNS = [("id", "LONG", True), ("s", "STRING", False), ("_fivetran_synced", "UTC_DATETIME", False),
           ("_fivetran_deleted", "BOOLEAN", False)]
HEX_BYTES = 100  # each row's `s`: 200 random hex characters
MB = 1_000_000


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def csv_of(first_id: int, rows: int, rng: np.random.Generator) -> bytes:
    """`rows` rows from `first_id` as CSV text (header first)."""
    raw = rng.integers(0, 256, size=rows * HEX_BYTES, dtype=np.uint8).tobytes().hex().encode()
    offsets = np.arange(0, (rows + 1) * 2 * HEX_BYTES, 2 * HEX_BYTES, dtype=np.int64)
    strings = pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets.tobytes()), pa.py_buffer(raw))
    table = pa.table({"id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)), "s": strings,
                      "_fivetran_synced": pa.array(["2024-01-01T00:00:00Z"] * rows),
                      "_fivetran_deleted": pa.array(["false"] * rows)})
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink, pacsv.WriteOptions(quoting_style="none"))
    return bytes(sink.getvalue())


def write_files(folder: Path, total_bytes: int, count: int) -> list[Path]:
    """`count` encrypted files of about total_bytes / count each, distinct ids (the first file calibrates)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(18)
    per_file = total_bytes // count
    rows, first_id, paths = 100_000, 1_000, []
    for n in range(count):
        sealed = seal(csv_of(first_id, rows, rng), KEY)
        if n == 0:  # calibrate the rows per file on the first one, then write it again at that size
            rows = max(1, int(rows * per_file / len(sealed)))
            sealed = seal(csv_of(first_id, rows, rng), KEY)
        path = folder / f"part-{n:03d}.csv.zstd.aes"
        path.write_bytes(sealed)
        paths.append(path)
        first_id += rows
        log(f"  {path.name}: {len(sealed) / MB:.0f} MB, {rows:,} rows")
    return paths


def table_proto() -> common.Table:
    table = common.Table(name="big")
    for name, kind, key in COLUMNS:
        table.columns.add(name=name, type=common.DataType.Value(kind), primary_key=key)
    return table


def write_batch(stub: Any, configuration: dict[str, str], paths: list[Path]) -> Any:
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name="bench", table=table_proto(),
                                    file_params=sdk.FileParams(compression=sdk.Compression.Value("ZSTD"),
                                                               encryption=sdk.Encryption.Value("AES"),
                                                               null_string=NULL_STRING,
                                                               unmodified_string=UNMODIFIED_STRING))
    for path in paths:
        request.replace_files.append(str(path))
        request.keys[str(path)] = KEY
    return stub.WriteBatch(request, timeout=7200)


def wait_serving(channel: grpc.Channel, process: subprocess.Popen[bytes], log_path: Path) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log_path.read_text()[-2000:]}")
        try:
            if health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server never reported SERVING")


def executors_rss(workers: list[subprocess.Popen[bytes]]) -> int:
    total = 0
    for worker in workers:
        for child in psutil.Process(worker.pid).children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
    return total


def run(args: argparse.Namespace) -> dict[str, Any]:
    from testbed.sparkcluster import start_cluster

    work = Path(args.work or tempfile.mkdtemp(prefix="cluster-memory-"))
    source = Path(args.source).resolve()
    env = {**os.environ, "PYTHONPATH": str(source), "SPARK_LOCAL_IP": "127.0.0.1"}
    files = sorted((work / "batches").glob("part-*.csv.zstd.aes"))
    if len(files) != args.files:
        log(f"writing {args.files} batch files of {args.gb} GB in total under {work / 'batches'}")
        files = write_files(work / "batches", int(args.gb * 1e9), args.files)
    s3 = None
    if args.backend == "s3":
        from testbed.s3server import ACCESS_KEY, SECRET_KEY, start_seaweedfs

        s3 = start_seaweedfs()
        s3.create_bucket("bench")
        configuration = {"root": f"s3://bench/run-{int(time.time())}", "s3_endpoint": s3.endpoint,
                         "aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
    else:
        configuration = {"root": str(work / f"root-{int(time.time())}")}
    os.environ["PYTHONPATH"] = str(source)  # the workers' Python workers import the checkout under test
    cluster = start_cluster(work / f"cluster-{int(time.time())}")
    port = free_port()
    server_log = work / f"server-{int(time.time())}.log"
    command = [sys.executable, "-m", "destination.cli", "serve", "--port", str(port), "--root", str(work / "root"),
               "--spark-master", cluster.url]
    if args.driver_memory:
        env["RECORDS_DESTINATION_DRIVER_MEMORY"] = args.driver_memory
    process = subprocess.Popen(command, cwd=source, env=env, stdout=open(server_log, "wb"), stderr=subprocess.STDOUT)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", MAX_MESSAGE),
                                                                 ("grpc.max_receive_message_length", MAX_MESSAGE)])
    result: dict[str, Any] = {"source": str(source), "backend": args.backend, "files": len(files),
                              "request_mb": round(sum(p.stat().st_size for p in files) / MB)}
    try:
        wait_serving(channel, process, server_log)
        stub = sdk_grpc.DestinationConnectorStub(channel)
        assert stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="bench",
                                                      table=table_proto())).success
        seed = work / "seed.csv.zstd.aes"  # one row: the big request then merges into a table with rows
        seed.write_bytes(seal(csv_of(0, 1, np.random.default_rng(1)), KEY))
        write_batch(stub, configuration, [seed])
        sampler = MemorySampler(process.pid)
        time.sleep(2)
        idle = sampler.peak  # the server between requests
        sampler.reset()
        executors_peak = 0
        started = time.perf_counter()
        log(f"WriteBatch of {len(files)} files ({result['request_mb']} MB) on {cluster.url}")
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(write_batch, stub, configuration, files)
            while not call.done():
                executors_peak = max(executors_peak, executors_rss(cluster.workers))
                time.sleep(0.5)
            try:
                answer = call.result()
                result["answer"] = answer.WhichOneof("response") or "success"
                if answer.WhichOneof("response") == "task":
                    result["answer"] = f"task: {answer.task.message[:300]}"
            except grpc.RpcError as exc:
                result["answer"] = f"{exc.code().name}: {(exc.details() or '')[:300]}"
        result["seconds"] = round(time.perf_counter() - started, 1)
        peak = sampler.peak
        sampler.stop()
        result.update(idle_total_mb=round(idle.total / MB), peak_total_mb=round(peak.total / MB),
                      peak_jvm_mb=round(peak.jvm / MB), peak_python_mb=round(peak.python / MB),
                      executors_peak_mb=round(executors_peak / MB), server_alive=process.poll() is None)
        result["log"] = [json.loads(line)["message"][:300] for line in server_log.read_text().splitlines()
                         if line.startswith("{") and "WriteBatch" in line][-1:]
    finally:
        channel.close()
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        cluster.stop()
        if s3 is not None:
            s3.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.0, help="the request's size (batch files as sent)")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--backend", choices=("s3", "local"), default="s3")
    parser.add_argument("--source", default=str(Path(__file__).resolve().parent.parent),
                        help="the checkout whose server runs (default: this one)")
    parser.add_argument("--driver-memory", default="", help="RECORDS_DESTINATION_DRIVER_MEMORY for the server")
    parser.add_argument("--work", default="", help="batch files and logs (kept; batch files are reused)")
    result = run(parser.parse_args(argv))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
