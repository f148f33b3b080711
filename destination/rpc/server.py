"""The gRPC server: IPv4 + IPv6, 128 MB messages, health and reflection, graceful SIGTERM."""
from __future__ import annotations

import os
import signal
import socket
import threading
from concurrent import futures
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from pyspark.sql import SparkSession

from destination.catalogs.catalog_settings import CatalogSettings, catalog_from_file
from destination.catalogs.startup import start_catch_up
from destination.process.spark_session import get_session
from destination.protocol import sdk, sdk_grpc
from destination.rpc.activity import RootLister
from destination.rpc.configuration import storage_spec
from destination.rpc.health_monitor import HealthMonitor, check_interval, root_check, spark_check
from destination.rpc.observe import Observer
from destination.rpc.roots import Roots
from destination.rpc.service import DestinationService
from destination.rpc.status_http import StatusServer
from destination.runtime import logs
from destination.runtime.settings import ServerOptions
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore

if TYPE_CHECKING:
    from destination.iceberg_rest.server import IcebergRestOptions, IcebergRestServer

MAX_MESSAGE = 128 * 1024 * 1024
SERVICE_NAME = "fivetran_sdk.v2.DestinationConnector"
PORT_TAKEN = ("cannot listen on port {port}: it is in use by another process (or not allowed); stop that process or "
              "choose another --port")


def build_server(options: ServerOptions, port: int,
                 workers: int = 8) -> tuple[grpc.Server, health.HealthServicer, DestinationService, int]:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpc"),
        options=[("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE),
                 ("grpc.so_reuseport", 0)],
    )
    service = assemble(options)
    sdk_grpc.add_DestinationConnectorServicer_to_server(service, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    reflection.enable_server_reflection(
        (sdk.DESCRIPTOR.services_by_name["DestinationConnector"].full_name, health.SERVICE_NAME, reflection.SERVICE_NAME),
        server,
    )
    bound = 0
    if not port_free(port):  # before gRPC tries: its refusal prints raw "Failed to add port" lines first
        raise SystemExit(PORT_TAKEN.format(port=port))
    try:
        bound = server.add_insecure_port(f"[::]:{port}")  # dual stack: IPv6 and IPv4
    except RuntimeError:
        bound = 0
    if not bound:
        try:
            bound = server.add_insecure_port(f"0.0.0.0:{port}")
        except RuntimeError:
            bound = 0
    if not bound:
        raise SystemExit(PORT_TAKEN.format(port=port))
    return server, health_servicer, service, bound


def assemble(options: ServerOptions) -> DestinationService:
    """The server's parts, built here and only here: its observer (metrics, status, progress), the Spark session it
    starts on first use, the roots its requests write to (their stores and write paths), and the service over
    them."""
    observer = Observer(options)

    def spark() -> SparkSession:
        return get_session(options.spark_master, options.driver_memory, options.spark_event_log,
                           options.spark_ui_port)
    return DestinationService(options, observer, Roots(options, observer, spark), spark)


def port_free(port: int) -> bool:
    """Whether this process may listen on the TCP port, on IPv6 and IPv4 or, as gRPC falls back, on IPv4 alone
    (with SO_REUSEADDR, as gRPC binds: a port in TIME_WAIT is free)."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((host, port))
                return True
        except OSError:
            continue
    return False


def start_status(options: ServerOptions, service: DestinationService,
                 port: int) -> tuple[StatusServer, RootLister]:
    """The HTTP port of /metrics and the status page, and the background listing of the server's root for it."""
    try:
        status = StatusServer(service.observer.activity, port, spark_ui_port=options.spark_ui_port)
    except OSError as exc:
        raise SystemExit(f"cannot listen on --metrics-port {port}: {exc.strerror or exc}; "
                         "stop the process using it or choose another port") from None
    lister = RootLister(TableStore(open_storage(storage_spec({}, options))), service.observer.activity,
                        options.status_refresh)
    status.start()
    lister.start()
    return status, lister


def start_iceberg_rest(options: ServerOptions, service: DestinationService,
                       rest: IcebergRestOptions) -> IcebergRestServer:
    """The served Iceberg REST catalog over the server's root and every root its requests write to (the service's
    stores tell its index of each commit and drop)."""
    from destination.iceberg_rest.server import IcebergRestServer
    from destination.iceberg_rest.warehouses import Warehouses

    warehouses = Warehouses(open_storage(storage_spec({}, options)), rest.vend_credentials)
    try:
        served = IcebergRestServer(warehouses, rest)
    except OSError as exc:
        raise SystemExit(f"cannot listen on --iceberg-rest-port {rest.port}: {exc.strerror or exc}; "
                         "stop the process using it or choose another port") from None
    service.roots.served = warehouses
    served.start()
    vended = "storage credentials vended" if rest.vend_credentials else "no storage credentials vended"
    logs.info(f"Iceberg REST catalog (read-only, bearer token, {vended}) on {served.scheme}://0.0.0.0:{served.port}/")
    return served


def write_port_file(path: str | None, port: int) -> None:
    """The gRPC port actually listened on, for the Docker HEALTHCHECK (RECORDS_DESTINATION_PORT_FILE)."""
    if not path:
        return
    temporary = f"{path}.{os.getpid()}"
    try:
        with open(temporary, "w", encoding="ascii") as out:
            out.write(f"{port}\n")
        os.replace(temporary, path)
    except OSError as exc:  # the server works without it; only a health probe without an address misses it
        logs.warning(f"cannot write the port file {path}: {exc.strerror or exc}")


def _catalog_of(options: ServerOptions) -> CatalogSettings:
    """`serve --catalog`'s settings (none: the start-up catch-up moves no entry)."""
    return catalog_from_file(options.catalog_file, storage_spec({}, options)) or CatalogSettings()


def serve(options: ServerOptions, port: int, iceberg_rest: IcebergRestOptions | None = None) -> int:
    logs.set_process_context(account_name=options.account_name, group_name=options.group_name)
    catalog = _catalog_of(options)  # a bad file stops the start, before the port is taken
    server, health_servicer, service, bound = build_server(options, port)
    status = start_status(options, service, options.metrics_port) if options.metrics_port is not None else None
    served = start_iceberg_rest(options, service, iceberg_rest) if iceberg_rest is not None else None
    server.start()
    write_port_file(options.port_file, bound)
    logs.info(f"listening on port {bound} (IPv4 and IPv6); tables under {options.root}; starting Spark ({options.spark_master})")
    if status is not None:
        logs.info(f"metrics and status page on http://0.0.0.0:{status[0].port}/ (/metrics for Prometheus)")
    stopping = threading.Event()
    grace = options.grace_seconds  # RECORDS_DESTINATION_GRACE_SECONDS

    def on_signal(signum: int, _frame: object) -> None:
        logs.info(f"received signal {signum}: finishing in-flight calls (up to {grace:g}s), then stopping")
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # the first check starts Spark; later ones start a new session when its JVM died
    monitor = HealthMonitor(health_servicer, ("", SERVICE_NAME),
                            [spark_check(service.spark), root_check(storage_spec({}, options))],
                            check_interval(options.health_interval))
    monitor.start()
    start_catch_up(storage_spec({}, options), catalog,
                   lambda schema, table: service.locks.hold(options.root, schema, table), stopping)
    # with a timeout: the process's signal may be delivered to another thread (gRPC's, Arrow's, a write's pool),
    # and then only the main thread's return to the interpreter runs the handler; an untimed wait never returns
    while not stopping.wait(0.5):
        pass
    monitor.stop()
    if status is not None:
        status[1].stop()
        status[0].stop()
    if served is not None:
        served.stop()
    server.stop(grace).wait()
    logs.info("stopped")
    return 0
