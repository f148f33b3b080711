"""A real `records-destination serve` subprocess for fault tests: its log, health, and its Spark JVM's processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from destination.protocol import sdk_grpc
from testbed.processes import children, command_line
from testbed.s3server import free_port

BIN = Path(sys.executable).parent
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WAIT_SECONDS = 180.0
SERVE_MARKED: set[str] = set()  # node ids of the tests marked `serve` (tests/conftest.py fills it at collection)


def check_marked() -> None:
    """A test that starts `serve` (and so Spark) must say so with `@pytest.mark.serve`, or `-m unit` would select it."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    if current and current not in SERVE_MARKED:
        raise AssertionError(f"{current} starts a `serve` process: mark it (or its module) with @pytest.mark.serve")


@dataclass
class ServerProcess:
    process: subprocess.Popen
    address: str
    log: Path

    def stub(self) -> Any:
        return sdk_grpc.DestinationConnectorStub(grpc.insecure_channel(self.address))

    def health(self) -> int | None:
        """The health status, or None while the server does not answer."""
        with grpc.insecure_channel(self.address) as channel:
            try:
                return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            except grpc.RpcError:
                return None

    def messages(self) -> list[dict[str, str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


def start_server(root: str, log: Path, *args: str, spark_master: str = "local[2]", wrapper: tuple[str, ...] = (),
                 **env: str) -> ServerProcess:
    """`serve` on a free port, with more command-line `args` and `env` added to this process's environment;
    `wrapper`, a command that runs it (its process is then the wrapper's)."""
    check_marked()
    port = free_port()
    process = subprocess.Popen([*wrapper, str(BIN / "records-destination"), "serve", "--port", str(port), "--root", root,
                                "--spark-master", spark_master, *args], stdout=open(log, "wb"), stderr=subprocess.DEVNULL,
                               env={**os.environ, **env})
    return ServerProcess(process, f"127.0.0.1:{port}", log)


def wait_for(condition: Callable[[], bool], what: str, server: ServerProcess) -> None:
    """Poll `condition` until it holds; fail naming `what` (with the server's log) after WAIT_SECONDS."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert server.process.poll() is None, f"the server exited while waiting for {what}: {server.log.read_text()}"
        assert time.monotonic() < deadline, f"never saw {what}: {server.log.read_text()}"
        time.sleep(0.05)


def spark_jvm(server_pid: int) -> int | None:
    """The server's Spark JVM (spark-submit execs java as the server's child)."""
    jvms = [pid for pid in children(server_pid) if "SparkSubmit" in command_line(pid)]
    return jvms[0] if jvms else None


def running_python_workers(jvm: int) -> bool:
    """True once the JVM has started PySpark's worker daemon, i.e. a job's tasks are running."""
    return any("pyspark" in command_line(pid) for pid in children(jvm))
