"""The optional HTTP port of `serve --metrics-port`: Prometheus metrics at /metrics, the status page at /, a table's
version history at /table, and the same data as JSON at /api/status and /api/progress (the tester's progress bar
reads the latter). Read-only (GET only), in the server process, from memory (activity.py): no storage is read per
request and no credential is ever in what it serves."""
from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from destination.process import metrics
from destination.process.spark_session import jvm_pid
from destination.rpc.activity import Activity
from destination.rpc.status_page import render_index, render_table
from destination.runtime import logs


def jvm_resident_bytes() -> int | None:
    """VmRSS of the local Spark JVM (Linux /proc), or None without one."""
    pid = jvm_pid()
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class StatusServer:
    def __init__(self, activity: Activity, port: int, host: str = "", spark_ui_port: int | None = None) -> None:
        self.activity = activity
        self.spark_ui_port = spark_ui_port
        self._http = ThreadingHTTPServer((host, port), _handler(self))
        self._http.daemon_threads = True
        self.port = int(self._http.server_address[1])
        self._thread = threading.Thread(target=self._http.serve_forever, name="status-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

def _handler(status: StatusServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "records-destination"

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/metrics":
                resident = jvm_resident_bytes()
                if resident is not None:
                    metrics.SPARK_JVM_MEMORY.set(resident)
                self._send(generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            elif url.path == "/":
                self._send(render_index(status.activity.snapshot(), self._spark_ui_url()), "text/html; charset=utf-8")
            elif url.path == "/table":
                found = status.activity.table(query.get("root", ""), query.get("schema", ""), query.get("table", ""))
                self._send(render_table(found), "text/html; charset=utf-8",
                           HTTPStatus.OK if found else HTTPStatus.NOT_FOUND)
            elif url.path == "/api/status":
                self._json(status.activity.snapshot())
            elif url.path == "/api/progress":
                self._json({"running": status.activity.running()})
            else:
                self._send(b"not found\n", "text/plain; charset=utf-8", HTTPStatus.NOT_FOUND)

        def _spark_ui_url(self) -> str | None:
            if status.spark_ui_port is None:
                return None
            host = (self.headers.get("Host") or "localhost").rsplit(":", 1)[0]
            return f"http://{host}:{status.spark_ui_port}/"

        def _json(self, value: Any) -> None:
            self._send(json.dumps(value).encode(), "application/json")

        def _send(self, body: bytes, content_type: str, code: HTTPStatus = HTTPStatus.OK) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per scrape would drown the server's own lines

        def log_error(self, format: str, *args: Any) -> None:
            logs.warning(f"status page: {format % args}")

    return Handler
