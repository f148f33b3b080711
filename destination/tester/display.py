"""The tester's view of a call while it runs. On a terminal: a live line redrawn in place, with a bar of the
server's Spark tasks when `--status-url` names the server's HTTP port (its /api/progress); otherwise the elapsed
time. Not on a terminal: a plain line every PLAIN_EVERY seconds for a call that runs that long."""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

PLAIN_EVERY = 10.0
BAR_WIDTH = 24


def render(rpc: str, target: str, elapsed: float, progress: dict[str, Any] | None, bar: bool) -> str:
    """One progress line of a call; `progress` is the server's entry for it (None: not known)."""
    text = f"{rpc} {target}: {elapsed:.0f}s"
    if progress is None or not progress.get("tasks_total"):
        return text
    done, total = int(progress["tasks_done"]), int(progress["tasks_total"])
    parts = [f"Spark tasks {done}/{total}"]
    if progress.get("files_decoded") is not None:
        parts.append(f"files {progress['files_decoded']}/{progress['files']}")
    if progress.get("mb_per_second") is not None:
        parts.append(f"{progress['mb_per_second']:.1f} MB/s")
    if progress.get("seconds_left") is not None:
        parts.append(f"~{progress['seconds_left']:.0f}s left")
    filled = round(BAR_WIDTH * done / total)
    prefix = f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] " if bar else ""
    return f"{text} {prefix}{', '.join(parts)}"


class CallProgress:
    def __init__(self, out: TextIO, interactive: bool, status_url: str | None = None, schema: str = "",
                 poll_seconds: float = 0.5) -> None:
        self._out = out
        self._interactive = interactive
        self._status_url = status_url.rstrip("/") if status_url else None
        self.schema = schema
        self._poll = poll_seconds

    @contextmanager
    def call(self, rpc: str, target: str) -> Iterator[None]:
        stopped = threading.Event()
        thread = threading.Thread(target=self._show, args=(rpc, target, stopped), name="tester-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stopped.set()
            thread.join(timeout=5)

    def _show(self, rpc: str, target: str, stopped: threading.Event) -> None:
        started = time.monotonic()
        last_plain = started
        drawn = 0
        while not stopped.wait(self._poll):
            now = time.monotonic()
            if self._interactive:
                line = render(rpc, target, now - started, self._server_progress(rpc, target), bar=True)
                self._out.write("\r" + line.ljust(drawn))
                self._out.flush()
                drawn = len(line)
            elif now - last_plain >= PLAIN_EVERY:
                last_plain = now
                self._out.write("     " + render(rpc, target, now - started, self._server_progress(rpc, target),
                                                 bar=False) + "\n")
                self._out.flush()
        if drawn:
            self._out.write("\r" + " " * drawn + "\r")  # the call's own OK/FAIL line replaces the bar
            self._out.flush()

    def _server_progress(self, rpc: str, target: str) -> dict[str, Any] | None:
        if self._status_url is None:
            return None
        try:
            with urllib.request.urlopen(f"{self._status_url}/api/progress", timeout=2) as response:
                running = json.loads(response.read())["running"]
        except (OSError, ValueError, KeyError):  # the page is optional: show the elapsed time only
            return None
        name = f"{self.schema}.{target.split(' (', 1)[0]}"  # targets read "table (11 rows)"
        return next((p for p in running if p.get("rpc") == rpc and p.get("table") == name), None)
