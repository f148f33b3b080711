"""The HTTP port of `serve --iceberg-rest-port`: the read side of the Iceberg REST catalog API (standard library
ThreadingHTTPServer, a thread per connection, optional TLS). Every request needs the bearer token of
`--iceberg-rest-token-file` (401 without it); every write answers 406 UnsupportedOperationException. No log line
holds a token, a header or a storage credential."""
from __future__ import annotations

import hmac
import socket
import ssl
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from destination.iceberg_rest import answers
from destination.iceberg_rest.tables import fivetran_name, served_name
from destination.iceberg_rest.warehouses import Warehouse, Warehouses
from destination.runtime import logs
from destination.runtime.errors import UserActionRequired, scrub

UNPREFIXED = ("namespaces", "tables", "views", "transactions", "oauth")  # a path's first segment without a prefix
REQUEST_TIMEOUT_SECONDS = 30.0  # a connection idle this long is closed (its thread freed)


@dataclass(frozen=True)
class IcebergRestOptions:
    """`serve --iceberg-rest-*`."""

    port: int
    token_file: str
    tls_cert: str | None = None
    tls_key: str | None = None
    vend_credentials: bool = False


def read_token(path: str) -> str:
    """The bearer token in `path` (its first line; never on the command line)."""
    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.readline().strip()
    except OSError as exc:
        raise UserActionRequired(f"--iceberg-rest-token-file {path}: {exc.strerror or exc}") from None
    if not token:
        raise UserActionRequired(f"--iceberg-rest-token-file {path} is empty: write the token clients send "
                                 "(Authorization: Bearer …) on its first line")
    return token


def tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise UserActionRequired("--iceberg-rest-tls-cert and --iceberg-rest-tls-key go together: give both or neither")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise UserActionRequired(f"--iceberg-rest-tls-cert {cert} / --iceberg-rest-tls-key {key} cannot be "
                                 f"loaded: {getattr(exc, 'strerror', None) or exc}") from None
    return context


class _Refusal(Exception):
    def __init__(self, status: HTTPStatus, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def _not_found(kind: str, what: str) -> _Refusal:
    return _Refusal(HTTPStatus.NOT_FOUND, kind, f"{what} does not exist")


class IcebergRestServer:
    def __init__(self, warehouses: Warehouses, options: IcebergRestOptions, host: str = "") -> None:
        self.warehouses = warehouses
        self._token = read_token(options.token_file).encode("utf-8")
        context = tls_context(options.tls_cert, options.tls_key)
        self.scheme = "https" if context is not None else "http"
        self._http = ThreadingHTTPServer((host, options.port), _handler(self))
        self._http.daemon_threads = True
        if context is not None:  # the handshake in the connection's thread (Handler.setup), not the accepting one
            self._http.socket = context.wrap_socket(self._http.socket, server_side=True,
                                                    do_handshake_on_connect=False)
        self.port = int(self._http.server_address[1])
        self._thread = threading.Thread(target=self._http.serve_forever, name="iceberg-rest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def authorized(self, header: str | None) -> bool:
        scheme, _, token = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("utf-8"), self._token)

    def answer(self, method: str, path: list[str], query: dict[str, str]) -> tuple[HTTPStatus, bytes]:
        """The answer to an authorized request (`path` split at `/`, each segment unquoted)."""
        if not path or path[0] != "v1":
            raise _not_found("NotFoundException", f"path /{'/'.join(path)}")
        rest = path[1:]
        if rest == ["config"] and method == "GET":
            warehouse = self.warehouses.named(query.get("warehouse", ""))
            if warehouse is None:
                raise _Refusal(HTTPStatus.BAD_REQUEST, "BadRequestException",
                               f"warehouse {query['warehouse']!r} is not a root this server serves: its --root, or "
                               "one its requests wrote to since it started")
            return HTTPStatus.OK, answers.config_answer(warehouse.prefix)
        if method not in ("GET", "HEAD"):
            raise _Refusal(HTTPStatus.NOT_ACCEPTABLE, "UnsupportedOperationException",
                           f"{method} is not supported: this catalog is read-only (the destination writes its tables)")
        prefix = None
        if rest and rest[0] not in UNPREFIXED:
            prefix, rest = rest[0], rest[1:]
        warehouse = self.warehouses.by_prefix(prefix)
        if warehouse is None:
            raise _not_found("NoSuchWarehouseException", f"warehouse prefix {prefix!r}")
        return _read(warehouse, method, rest, query)


def _read(warehouse: Warehouse, method: str, rest: list[str], query: dict[str, str]) -> tuple[HTTPStatus, bytes]:
    tables = warehouse.tables
    if rest == ["namespaces"]:
        parent = query.get("parent")
        if parent is not None:  # one level only: nothing under a namespace
            _schema_of(warehouse, parent)
            return HTTPStatus.OK, answers.namespaces_answer([])
        return HTTPStatus.OK, answers.namespaces_answer(sorted(served_name(s) for s in tables.schemas()))
    if len(rest) < 2 or rest[0] != "namespaces":
        raise _not_found("NotFoundException", f"path {'/'.join(rest)}")
    namespace = rest[1]
    schema = _schema_of(warehouse, namespace, listed=len(rest) < 4)  # a table's own read says whether it exists
    if len(rest) == 2:
        return (HTTPStatus.NO_CONTENT, b"") if method == "HEAD" else (HTTPStatus.OK,
                                                                      answers.namespace_answer(namespace))
    if rest[2:] == ["tables"]:
        return HTTPStatus.OK, answers.tables_answer(namespace, sorted(served_name(t) for t in tables.tables(schema)))
    if rest[2:] == ["views"]:
        return HTTPStatus.OK, answers.views_answer()
    if len(rest) == 4 and rest[2] == "tables":
        table = fivetran_name(rest[3])
        found = None if table is None else tables.answer(
            schema, table, lambda loaded: answers.table_answer(loaded, warehouse.config))
        if found is None:
            raise _not_found("NoSuchTableException", f"table {namespace}.{rest[3]}")
        return (HTTPStatus.NO_CONTENT, b"") if method == "HEAD" else (HTTPStatus.OK, found)
    raise _not_found("NotFoundException", f"path {'/'.join(rest)}")


def _schema_of(warehouse: Warehouse, namespace: str, listed: bool = True) -> str:
    """The schema a namespace names (`listed`: checked against the root's schemas, a listing)."""
    schema = None if "\x1f" in namespace else fivetran_name(namespace)
    if schema is None or (listed and not warehouse.tables.has_schema(schema)):
        raise _not_found("NoSuchNamespaceException", f"namespace {namespace}")
    return schema


def _handler(server: IcebergRestServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "records-destination"
        protocol_version = "HTTP/1.1"  # keep-alive: a client's calls share one connection (and one TLS handshake)
        timeout = REQUEST_TIMEOUT_SECONDS

        def setup(self) -> None:
            super().setup()
            # the headers and the body are two writes: without this, Nagle's algorithm and the client's delayed
            # ACK hold the body back 40 ms on a kept-alive connection
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()

        def do_GET(self) -> None:
            self._serve("GET")

        def do_HEAD(self) -> None:
            self._serve("HEAD")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)  # a write's body, unread, would be taken for the next request
            url = urlsplit(self.path)
            path = [unquote(part) for part in url.path.strip("/").split("/")]
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            try:
                if not server.authorized(self.headers.get("Authorization")):
                    raise _Refusal(HTTPStatus.UNAUTHORIZED, "NotAuthorizedException",
                                   "a bearer token is required (Authorization: Bearer <the token file's token>)")
                status, body = server.answer(method, path, query)
            except _Refusal as refusal:
                status, body = refusal.status, answers.error_answer(refusal.status, refusal.kind, str(refusal))
            except Exception as exc:  # a storage fault: the client sees its kind, the log names the path
                logs.warning(f"iceberg rest: {method} {url.path} failed: {type(exc).__name__}: {scrub(str(exc))[:300]}")
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                body = answers.error_answer(status, "ServerErrorException", f"{type(exc).__name__} reading the table")
            self._send(method, status, body)

        def _send(self, method: str, status: HTTPStatus, body: bytes) -> None:
            self.send_response(status)
            if status == HTTPStatus.UNAUTHORIZED:
                self.send_header("WWW-Authenticate", 'Bearer realm="iceberg"')
            if status != HTTPStatus.NO_CONTENT:
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if method != "HEAD" and status != HTTPStatus.NO_CONTENT:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a line per request would drown the server's own; none may carry a header

        def log_error(self, format: str, *args: Any) -> None:
            logs.warning(f"iceberg rest: {format % args}")

    return Handler
