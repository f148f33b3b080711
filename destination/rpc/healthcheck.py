"""`python -m destination.rpc.healthcheck HOST:PORT`: exit 0 when the gRPC health service says SERVING."""
from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(address: str = "localhost:50052") -> int:
    try:
        with grpc.insecure_channel(address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=4)
    except grpc.RpcError as exc:
        print(f"unhealthy: {exc.code().name}")
        return 1
    serving = status.status == health_pb2.HealthCheckResponse.SERVING
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(status.status))
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
