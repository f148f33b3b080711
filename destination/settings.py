"""The server's settings, read once when it starts: the `serve` command's options and its environment (README
"Tuning"). The only module that reads the environment; every other module receives what it needs from here."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from destination.storage.base import S3_RETRY_ATTEMPTS

DRIVER_MEMORY_ENV = "RECORDS_DESTINATION_DRIVER_MEMORY"
SMALL_REQUEST_BYTES_ENV = "RECORDS_DESTINATION_SMALL_REQUEST_BYTES"
SPARK_EVENT_LOG_ENV = "RECORDS_DESTINATION_SPARK_EVENT_LOG"
HEALTH_INTERVAL_ENV = "RECORDS_DESTINATION_HEALTH_INTERVAL"
GRACE_SECONDS_ENV = "RECORDS_DESTINATION_GRACE_SECONDS"
S3_RETRY_ATTEMPTS_ENV = "RECORDS_DESTINATION_S3_RETRY_ATTEMPTS"
AWS_ACCESS_KEY_ID_ENV, AWS_SECRET_ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"

DRIVER_MEMORY = "1g"  # rows cross the JVM only as byte arrays: a small heap bounds the server's memory
SMALL_REQUEST_BYTES = 16 << 20  # requests whose batch files (as sent) are at most this are decoded on the driver
HEALTH_INTERVAL = 5.0  # seconds between health checks
GRACE_SECONDS = 60.0  # how long in-flight calls may run after SIGTERM


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    root: str = "./data"
    batch_file_format: str = "csv"  # csv | parquet
    spark_master: str = "local[*]"
    driver_memory: str = DRIVER_MEMORY  # the Spark driver's heap (local mode: the whole JVM)
    spark_event_log: str | None = None  # a directory: Spark writes its event log there (bench/eventlog.py)
    small_request_bytes: int = SMALL_REQUEST_BYTES  # 0: every request goes through Spark tasks
    health_interval: float = HEALTH_INTERVAL  # seconds between health checks (kept within [0.1, 60])
    grace_seconds: float = GRACE_SECONDS  # in-flight calls' time after SIGTERM
    s3_retry_attempts: int = S3_RETRY_ATTEMPTS  # attempts per S3 call (StorageSpec carries it into tasks)
    # where a large write's sorted runs are staged in Spark's local mode (removed after each job)
    scratch_dir: str = os.path.join(tempfile.gettempdir(), "records-destination-scratch")


def server_options(*, root: str, batch_file_format: str, spark_master: str,
                   environ: Mapping[str, str] = os.environ) -> ServerOptions:
    """The command line's options with the tuning variables of the environment."""
    return ServerOptions(root=root, batch_file_format=batch_file_format, spark_master=spark_master,
                         driver_memory=environ.get(DRIVER_MEMORY_ENV) or DRIVER_MEMORY,
                         spark_event_log=environ.get(SPARK_EVENT_LOG_ENV) or None,
                         small_request_bytes=int(environ.get(SMALL_REQUEST_BYTES_ENV) or SMALL_REQUEST_BYTES),
                         health_interval=float(environ.get(HEALTH_INTERVAL_ENV) or HEALTH_INTERVAL),
                         grace_seconds=float(environ.get(GRACE_SECONDS_ENV) or GRACE_SECONDS),
                         s3_retry_attempts=s3_retry_attempts(environ))


def s3_retry_attempts(environ: Mapping[str, str] = os.environ) -> int:
    """Attempts per S3 call (RECORDS_DESTINATION_S3_RETRY_ATTEMPTS, at least 1): the server's, and the commands'."""
    return max(1, int(environ.get(S3_RETRY_ATTEMPTS_ENV) or S3_RETRY_ATTEMPTS))


def s3_credentials(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(access key id, secret access key) for the commands that read a root without a server."""
    return environ.get(AWS_ACCESS_KEY_ID_ENV, ""), environ.get(AWS_SECRET_ACCESS_KEY_ENV, "")
