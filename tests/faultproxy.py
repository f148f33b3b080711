"""A TCP proxy on 127.0.0.1 in front of the test S3 server that can make the endpoint fail for a while.

Armed with a trigger (a bytes regular expression matched against a request, e.g. a PUT of a `_manifest` key), the
outage starts on the request that matches it: that connection is reset, and so are the next `attempts` connections or requests (new connections are accepted
and reset at once, as a crashed endpoint behind a load balancer does). The outage is counted in attempts rather
than seconds, so whether a client's retries outlast it does not depend on timing.
"""
from __future__ import annotations

import re
import socket
import struct
import threading
from urllib.parse import urlparse

UNTIL_RESTORED = -1
_REQUEST_LINE = re.compile(rb"(?:\A|\r\n)(GET|PUT|HEAD|POST|DELETE) (\S+) HTTP/1\.1\r\n")


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parsed = urlparse(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._trigger: re.Pattern[bytes] | None = None
        self._outage_attempts = 0
        self._failing = 0  # attempts still to fail; UNTIL_RESTORED: until restore()
        self.failed = 0  # attempts failed so far
        self.requests: list[tuple[str, str]] = []  # (method, path and query) of every request passed on, in order
        self._cut: tuple[re.Pattern[bytes], int, int] | None = None  # (trigger, bytes kept, responses still to cut)
        self._closed = False
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def arm(self, trigger: bytes, attempts: int) -> None:
        """Start an outage at the first request matching the regular expression `trigger`, failing it and
        `attempts` more (UNTIL_RESTORED: every one until `restore`)."""
        with self._lock:
            self._trigger, self._outage_attempts = re.compile(trigger, re.MULTILINE), attempts

    def cut_responses(self, trigger: bytes, keep: int, times: int) -> None:
        """Break off the responses to the next `times` requests matching `trigger` after `keep` bytes (the status
        line and headers included) and reset the connection: a connection dropped in the middle of a body."""
        with self._lock:
            self._cut = (re.compile(trigger, re.MULTILINE), keep, times)

    def _cuts(self, chunk: bytes) -> int | None:
        """The bytes of this request's response to pass on before breaking it off (None: all of them)."""
        with self._lock:
            if self._cut is None or not self._cut[0].search(chunk):
                return None
            trigger, keep, times = self._cut
            self._cut = (trigger, keep, times - 1) if times > 1 else None
            return keep

    def restore(self) -> None:
        with self._lock:
            self._trigger, self._failing = None, 0

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _should_fail(self, chunk: bytes | None) -> bool:
        """Count one attempt against the outage (a new connection: chunk None; a request: its bytes)."""
        with self._lock:
            if self._failing == 0 and chunk is not None and self._trigger is not None and self._trigger.search(chunk):
                self._trigger, self._failing = None, self._outage_attempts + 1 if self._outage_attempts >= 0 else -1
            if self._failing == 0:
                return False
            if self._failing > 0:
                self._failing -= 1
            self.failed += 1
            return True

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._should_fail(None):
                _reset(client)
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._upstream)
        except OSError:
            _reset(client)
            return
        cut: list[int | None] = [None]  # bytes of the coming response still to pass on before breaking it off
        threading.Thread(target=_pump, args=(upstream, client, cut), daemon=True).start()
        try:
            while chunk := client.recv(65536):
                if self._should_fail(chunk):
                    break
                cut[0] = self._cuts(chunk)
                with self._lock:  # a request line starts a chunk (or follows the previous request's body end)
                    self.requests += [(m.group(1).decode(), m.group(2).decode()) for m in _REQUEST_LINE.finditer(chunk)]
                upstream.sendall(chunk)
        except OSError:
            pass
        _reset(client)
        _reset(upstream)


def _pump(source: socket.socket, sink: socket.socket, cut: list[int | None] | None = None) -> None:
    try:
        while chunk := source.recv(65536):
            left = cut[0] if cut is not None else None
            if left is not None and len(chunk) >= left:
                sink.sendall(chunk[:left])
                for sock in (sink, source):  # shut down first: the thread blocked reading the client wakes up
                    sock.shutdown(socket.SHUT_RDWR)
                return
            if left is not None and cut is not None:
                cut[0] = left - len(chunk)
            sink.sendall(chunk)
    except OSError:
        pass


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a dropped endpoint does, rather than an orderly FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass
