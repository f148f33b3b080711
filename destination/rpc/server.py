"""The gRPC server: IPv4 + IPv6, 128 MB messages, health and reflection, graceful SIGTERM."""
from __future__ import annotations

import signal
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from destination import logs
from destination.protocol import sdk, sdk_grpc
from destination.rpc.configuration import storage_spec
from destination.rpc.health_monitor import HealthMonitor, check_interval, root_check, spark_check
from destination.rpc.service import DestinationService
from destination.settings import ServerOptions

MAX_MESSAGE = 128 * 1024 * 1024
SERVICE_NAME = "fivetran_sdk.v2.DestinationConnector"


def build_server(options: ServerOptions, port: int,
                 workers: int = 8) -> tuple[grpc.Server, health.HealthServicer, DestinationService, int]:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpc"),
        options=[("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE),
                 ("grpc.so_reuseport", 0)],
    )
    service = DestinationService(options)
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
        raise SystemExit(f"cannot listen on port {port}: it is in use by another process (or not allowed); "
                         "stop that process or choose another --port")
    return server, health_servicer, service, bound


def serve(options: ServerOptions, port: int) -> int:
    server, health_servicer, service, bound = build_server(options, port)
    server.start()
    logs.info(f"listening on port {bound} (IPv4 and IPv6); tables under {options.root}; starting Spark ({options.spark_master})")
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
    # with a timeout: the process's signal may be delivered to another thread (gRPC's, Arrow's, a write's pool),
    # and then only the main thread's return to the interpreter runs the handler; an untimed wait never returns
    while not stopping.wait(0.5):
        pass
    monitor.stop()
    server.stop(grace).wait()
    logs.info("stopped")
    return 0
