# records-destination: Java 17 runtime (for Spark) + the Python package, serving gRPC on 50052 (and, with
# --metrics-port 9464, Prometheus metrics and the status page).
# ARG BASE lets a local build use a locally made Debian bookworm base (public images may be unreachable).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY protos ./protos
COPY destination ./destination
COPY spark_jobs ./spark_jobs
COPY docker/entrypoint.sh /usr/local/bin/records-destination-entrypoint
# hadolint ignore=DL3013
RUN python3 -m pip install --no-cache-dir . \
    && useradd --create-home --uid 10001 destination \
    && mkdir -p /data && chown destination:destination /data \
    && chmod 0755 /usr/local/bin/records-destination-entrypoint

# No USER: the entrypoint starts as root only to make a mounted /data writable for uid 10001 (a bind mount the
# docker daemon creates is root's), then runs the server as uid 10001 with setpriv (docker/entrypoint.sh).
# the server writes the port it listens on here; the HEALTHCHECK reads it, so it follows --port
ENV PYTHONUNBUFFERED=1 RECORDS_DESTINATION_PORT_FILE=/tmp/records-destination.port
EXPOSE 50052 9464
VOLUME ["/data"]
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-m", "destination.rpc.healthcheck"]
ENTRYPOINT ["records-destination-entrypoint", "records-destination", "serve"]
CMD ["--port", "50052", "--root", "/data"]
