"""`python -m destination.rpc.healthcheck [HOST:PORT]`: exit 0 when the gRPC health service says SERVING.

Without an address it asks localhost on the port `serve` wrote into RECORDS_DESTINATION_PORT_FILE (the Docker
image sets it), so the HEALTHCHECK follows `--port`; 50052 when there is no such file."""
from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from destination.runtime.settings import port_file

DEFAULT_PORT = 50052


def default_address(path: str | None) -> str:
    """localhost and the port written in `path` (the port `serve` listens on), else the default port."""
    port = DEFAULT_PORT
    if path:
        try:
            with open(path, encoding="ascii") as written:
                port = int(written.read().strip())
        except (OSError, ValueError):
            pass  # not started yet, or another layout: the default port
    return f"localhost:{port}"


def main(address: str | None = None) -> int:
    address = address or default_address(port_file())
    try:
        with grpc.insecure_channel(address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=4)
    except grpc.RpcError as exc:
        print(f"unhealthy: {exc.code().name} at {address}")
        return 1
    serving = status.status == health_pb2.HealthCheckResponse.SERVING
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(status.status))
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
