"""The server under test: `records-destination serve` as a subprocess, its memory sampled, called over gRPC."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.batches import BatchFile
from bench.data import COLUMNS, KEY, START, system_columns
from destination.protocol import common, sdk, sdk_grpc
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING

MAX_MESSAGE = 128 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Peak:
    total: int = 0
    jvm: int = 0
    python: int = 0


class MemorySampler:
    """Samples the RSS of a process and its descendants every 100 ms; JVM and Python processes apart."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.peak = Peak()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        self.peak = Peak()

    def now(self) -> Peak:
        """The RSS at this moment (the server, its JVM and Spark's Python workers)."""
        jvm = python = 0
        for p in [self.root, *self.root.children(recursive=True)]:
            try:
                rss = p.memory_info().rss
                name = p.name()
            except psutil.Error:
                continue
            if "java" in name:
                jvm += rss
            else:
                python += rss
        return Peak(jvm + python, jvm, python)

    def _sample(self) -> None:
        current = self.now()
        jvm, python = current.jvm, current.python
        peak = self.peak
        self.peak = Peak(max(peak.total, jvm + python), max(peak.jvm, jvm), max(peak.python, python))

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._sample()
            except psutil.Error:
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


class Server:
    def __init__(self, root: str, log_path: Path, extra_env: dict[str, str] | None = None,
                 metrics: bool = False) -> None:
        self.port = free_port()
        env = {**os.environ, **(extra_env or {})}
        self.log = open(log_path, "w")
        command = [sys.executable, "-m", "destination.cli", "serve", "--port", str(self.port), "--root", root]
        self.metrics_port = free_port() if metrics else None
        if self.metrics_port is not None:
            command += ["--metrics-port", str(self.metrics_port)]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}", options=[
            ("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE)])
        self.stub = sdk_grpc.DestinationConnectorStub(self.channel)
        self._wait_serving()
        self.memory = MemorySampler(self.process.pid)

    def counter(self, name: str) -> float:
        """A counter of the server's /metrics (`records_destination_<name>_total`), summed over its labels."""
        from prometheus_client.parser import text_string_to_metric_families

        assert self.metrics_port is not None, "the server was started without metrics"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
        wanted = f"records_destination_{name}_total"
        return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
                   if s.name == wanted)

    def _wait_serving(self, timeout: float = 180.0) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}; see {self.log.name}")
            try:
                status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.5)
        raise RuntimeError("the server did not become SERVING in time")

    def stop(self) -> None:
        self.memory.stop()
        self.channel.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def table_proto(name: str, history: bool) -> common.Table:
    table = common.Table(name=name)
    for col, ftype, params in COLUMNS:
        c = table.columns.add(name=col, type=common.DataType.Value(ftype), primary_key=col == KEY)
        if params:
            c.params.decimal.precision, c.params.decimal.scale = params
    for col, ftype in system_columns(history):
        table.columns.add(name=col, type=common.DataType.Value(ftype), primary_key=col == START)
    return table


def file_params() -> sdk.FileParams:
    return sdk.FileParams(compression=sdk.Compression.Value("ZSTD"), encryption=sdk.Encryption.Value("AES"),
                          null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)


def _check(response: Any, what: str) -> None:
    which = response.WhichOneof("response")
    if which not in ("success", None) or (which is None and not getattr(response, "success", False)):
        raise RuntimeError(f"{what}: {response}")


def unknown_fields(stub: Any, configuration: dict[str, str]) -> set[str]:
    """The configuration's fields that the server's form does not list (the server ignores them)."""
    form = stub.ConfigurationForm(common.ConfigurationFormRequest(), timeout=60)
    return set(configuration) - {f.name for f in form.fields}


def create_table(stub: Any, configuration: dict[str, str], schema: str, name: str, history: bool) -> None:
    _check(stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name=schema,
                                                   table=table_proto(name, history))), f"CreateTable {name}")


def write(stub: Any, configuration: dict[str, str], schema: str, name: str, files: list[BatchFile], history: bool) -> None:
    call = stub.WriteHistoryBatch if history else stub.WriteBatch
    _check(call(write_request(configuration, schema, name, files, history), timeout=7200), f"write {name}")


def write_request(configuration: dict[str, str], schema: str, name: str, files: list[BatchFile],
                  history: bool) -> Any:
    cls = sdk.WriteHistoryBatchRequest if history else sdk.WriteBatchRequest
    request = cls(configuration=configuration, schema_name=schema, table=table_proto(name, history),
                  file_params=file_params())
    fields = {"earliest": "earliest_start_files", "replace": "replace_files", "update": "update_files",
              "delete": "delete_files"}
    for f in files:
        getattr(request, fields[f.kind]).append(f.path)
        request.keys[f.path] = f.key
    return request


def soft_truncate(stub: Any, configuration: dict[str, str], schema: str, name: str, cutoff_ms: int) -> None:
    from google.protobuf.timestamp_pb2 import Timestamp

    request = sdk.TruncateRequest(configuration=configuration, schema_name=schema, table_name=name,
                                  synced_column="_fivetran_synced",
                                  utc_delete_before=Timestamp(seconds=cutoff_ms // 1000, nanos=cutoff_ms % 1000 * 10**6))
    request.soft.deleted_column = "_fivetran_deleted"
    _check(stub.Truncate(request, timeout=7200), f"Truncate {name}")
