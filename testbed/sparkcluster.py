"""A real Spark standalone cluster on 127.0.0.1 for tests: a master and workers started with pyspark's bundled
`spark-class`; each application gets one executor JVM per worker (children of the worker's JVM)."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from testbed.processes import children, command_line
from testbed.s3server import free_port

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER, WORKER = "org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"
EXECUTOR = "CoarseGrainedExecutorBackend"
START_SECONDS = 90.0


@dataclass
class SparkCluster:
    url: str  # spark://127.0.0.1:PORT
    master: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def executor_jvms(self) -> dict[int, list[int]]:
        """Each worker's executor JVMs (worker pid → executor pids)."""
        return {w.pid: [pid for pid in children(w.pid) if EXECUTOR in command_line(pid)] for w in self.workers}

    def stop(self) -> None:
        """Workers first (a worker stops its executors as it shuts down), then the master."""
        for process in [*self.workers, self.master]:
            if process.poll() is None:
                process.terminate()
        for process in [*self.workers, self.master]:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)


def start_cluster(directory: Path, workers: int = 2, cores: int = 1, memory: str = "1536m") -> SparkCluster:
    """A master and `workers` workers of `cores` cores and `memory` each; returns once every worker is registered.
    spark-class execs java, so each process is the JVM itself."""
    directory.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(directory),
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    port = free_port()
    master_log = directory / "master.log"
    master = subprocess.Popen([str(SPARK_CLASS), MASTER, "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(free_port())],
                              stdout=open(master_log, "wb"), stderr=subprocess.STDOUT, env=env)
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", master)
    try:
        _wait_for_line(master_log, "I have been elected leader", master)
        for n in range(workers):
            log = directory / f"worker-{n}.log"
            worker = subprocess.Popen([str(SPARK_CLASS), WORKER, "--host", "127.0.0.1", "--cores", str(cores),
                                       "--memory", memory, "--webui-port", str(free_port()),
                                       "--work-dir", str(directory / f"work-{n}"), cluster.url],
                                      stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
            cluster.workers.append(worker)
            _wait_for_line(log, "Successfully registered with master", worker)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"{log.name}: the process exited: {log.read_text(errors='replace')[-2000:]}"
        assert time.monotonic() < deadline, f"{log.name}: never saw {text!r}: {log.read_text(errors='replace')[-2000:]}"
        time.sleep(0.2)
