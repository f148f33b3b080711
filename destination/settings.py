"""The server's settings, read once when it starts: the `serve` command's options and its environment (README
"Tuning"). The only module that reads the environment; every other module receives what it needs from here."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DRIVER_MEMORY_ENV = "RECORDS_DESTINATION_DRIVER_MEMORY"
SMALL_REQUEST_BYTES_ENV = "RECORDS_DESTINATION_SMALL_REQUEST_BYTES"
SPARK_EVENT_LOG_ENV = "RECORDS_DESTINATION_SPARK_EVENT_LOG"
AWS_ACCESS_KEY_ID_ENV, AWS_SECRET_ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"

DRIVER_MEMORY = "1g"  # rows cross the JVM only as byte arrays: a small heap bounds the server's memory
SMALL_REQUEST_BYTES = 16 << 20  # requests whose batch files (as sent) are at most this are decoded on the driver


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    root: str = "./data"
    batch_file_format: str = "csv"  # csv | parquet
    spark_master: str = "local[*]"
    driver_memory: str = DRIVER_MEMORY  # the Spark driver's heap (local mode: the whole JVM)
    spark_event_log: str | None = None  # a directory: Spark writes its event log there (bench/eventlog.py)
    small_request_bytes: int = SMALL_REQUEST_BYTES  # 0: every request goes through Spark tasks


def server_options(*, root: str, batch_file_format: str, spark_master: str,
                   environ: Mapping[str, str] = os.environ) -> ServerOptions:
    """The command line's options with the tuning variables of the environment."""
    return ServerOptions(root=root, batch_file_format=batch_file_format, spark_master=spark_master,
                         driver_memory=environ.get(DRIVER_MEMORY_ENV) or DRIVER_MEMORY,
                         spark_event_log=environ.get(SPARK_EVENT_LOG_ENV) or None,
                         small_request_bytes=int(environ.get(SMALL_REQUEST_BYTES_ENV) or SMALL_REQUEST_BYTES))


def s3_credentials(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(access key id, secret access key) for the commands that read a root without a server."""
    return environ.get(AWS_ACCESS_KEY_ID_ENV, ""), environ.get(AWS_SECRET_ACCESS_KEY_ENV, "")
