"""The server's settings, read once when it starts: the `serve` command's options and its environment
(docs/guide/operating.md "Tuning"). The only module that reads the environment; every other module receives what it
needs from here."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from destination.runtime.errors import UserActionRequired
from destination.storage.base import S3_RETRY_ATTEMPTS

DRIVER_MEMORY_ENV = "RECORDS_DESTINATION_DRIVER_MEMORY"
SMALL_REQUEST_BYTES_ENV = "RECORDS_DESTINATION_SMALL_REQUEST_BYTES"
SPARK_EVENT_LOG_ENV = "RECORDS_DESTINATION_SPARK_EVENT_LOG"
HEALTH_INTERVAL_ENV = "RECORDS_DESTINATION_HEALTH_INTERVAL"
GRACE_SECONDS_ENV = "RECORDS_DESTINATION_GRACE_SECONDS"
S3_RETRY_ATTEMPTS_ENV = "RECORDS_DESTINATION_S3_RETRY_ATTEMPTS"
PROGRESS_INTERVAL_ENV = "RECORDS_DESTINATION_PROGRESS_INTERVAL"
METRICS_TABLES_ENV = "RECORDS_DESTINATION_METRICS_TABLES"
STATUS_REFRESH_ENV = "RECORDS_DESTINATION_STATUS_REFRESH"
PORT_FILE_ENV = "RECORDS_DESTINATION_PORT_FILE"
ACCOUNT_NAME_ENV, GROUP_NAME_ENV = "FIVETRAN_ACCOUNT_NAME", "FIVETRAN_GROUP_NAME"
AWS_ACCESS_KEY_ID_ENV, AWS_SECRET_ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"

DRIVER_MEMORY = "1g"  # rows cross the JVM only as byte arrays: a small heap bounds the server's memory
SMALL_REQUEST_BYTES = 16 << 20  # requests whose batch files (as sent) are at most this are decoded on the driver
HEALTH_INTERVAL = 5.0  # seconds between health checks
GRACE_SECONDS = 60.0  # how long in-flight calls may run after SIGTERM
PROGRESS_INTERVAL = 10.0  # seconds between progress lines of a long write
METRICS_TABLES = 50  # tables with a `table` label of their own in /metrics (the most recently active)
STATUS_REFRESH = 300.0  # seconds between background listings of the root for the status page


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
    metrics_port: int | None = None  # the HTTP port of /metrics and the status page (None: off)
    spark_ui_port: int | None = None  # Spark's own web UI (None: off)
    progress_interval: float = PROGRESS_INTERVAL  # seconds between a long write's progress lines
    metrics_tables: int = METRICS_TABLES  # how many tables (the most recently active) keep a `table` label
    status_refresh: float = STATUS_REFRESH  # seconds between background listings of the root (status page)
    account_name: str = ""  # FIVETRAN_ACCOUNT_NAME and FIVETRAN_GROUP_NAME: context of every log line
    group_name: str = ""
    port_file: str | None = None  # a file the server writes its gRPC port into (the Docker HEALTHCHECK reads it)
    # where a large write's sorted runs are staged in Spark's local mode (removed after each job)
    scratch_dir: str = os.path.join(tempfile.gettempdir(), "records-destination-scratch")
    catalog_file: str | None = None  # `serve --catalog`: the catalog the start-up catch-up moves entries in


def server_options(*, root: str, batch_file_format: str, spark_master: str, metrics_port: int | None = None,
                   spark_ui_port: int | None = None, catalog_file: str | None = None,
                   environ: Mapping[str, str] = os.environ) -> ServerOptions:
    """The command line's options with the tuning variables of the environment; every variable that is not a
    number is named in one UserActionRequired (not only the first)."""
    env = _Numbers(environ)
    options = ServerOptions(root=root, batch_file_format=batch_file_format, spark_master=spark_master,
                            metrics_port=metrics_port, spark_ui_port=spark_ui_port, catalog_file=catalog_file,
                            progress_interval=env.number(PROGRESS_INTERVAL_ENV, PROGRESS_INTERVAL),
                            metrics_tables=max(1, int(env.number(METRICS_TABLES_ENV, METRICS_TABLES, integer=True))),
                            status_refresh=env.number(STATUS_REFRESH_ENV, STATUS_REFRESH),
                            account_name=environ.get(ACCOUNT_NAME_ENV, ""), group_name=environ.get(GROUP_NAME_ENV, ""),
                            port_file=port_file(environ),
                            driver_memory=environ.get(DRIVER_MEMORY_ENV) or DRIVER_MEMORY,
                            spark_event_log=environ.get(SPARK_EVENT_LOG_ENV) or None,
                            small_request_bytes=int(env.number(SMALL_REQUEST_BYTES_ENV, SMALL_REQUEST_BYTES,
                                                               integer=True)),
                            health_interval=env.number(HEALTH_INTERVAL_ENV, HEALTH_INTERVAL),
                            grace_seconds=env.number(GRACE_SECONDS_ENV, GRACE_SECONDS),
                            s3_retry_attempts=max(1, int(env.number(S3_RETRY_ATTEMPTS_ENV, S3_RETRY_ATTEMPTS,
                                                                    integer=True))))
    if env.problems:
        raise UserActionRequired("; ".join(env.problems))
    return options


def s3_retry_attempts(environ: Mapping[str, str] = os.environ) -> int:
    """Attempts per S3 call (RECORDS_DESTINATION_S3_RETRY_ATTEMPTS, at least 1): the server's, and the commands'."""
    env = _Numbers(environ)
    attempts = max(1, int(env.number(S3_RETRY_ATTEMPTS_ENV, S3_RETRY_ATTEMPTS, integer=True)))
    if env.problems:
        raise UserActionRequired(env.problems[0])
    return attempts


class _Numbers:
    """Reads numeric environment variables, noting each one that is not a number (its default stands in) so that
    one message names them all."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.problems: list[str] = []

    def number(self, name: str, default: float, *, integer: bool = False) -> float:
        text = (self._environ.get(name) or "").strip()
        if not text:
            return default
        try:
            return int(text) if integer else float(text)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            self.problems.append(f"the environment variable {name} is {text!r}, not {kind} (unset: {default:g})")
            return default


def port_file(environ: Mapping[str, str] = os.environ) -> str | None:
    """RECORDS_DESTINATION_PORT_FILE: where `serve` writes the gRPC port it listens on, and where the Docker
    HEALTHCHECK (destination.rpc.healthcheck) reads it."""
    return environ.get(PORT_FILE_ENV) or None


def s3_credentials(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(access key id, secret access key) for the commands that read a root without a server."""
    return environ.get(AWS_ACCESS_KEY_ID_ENV, ""), environ.get(AWS_SECRET_ACCESS_KEY_ENV, "")
