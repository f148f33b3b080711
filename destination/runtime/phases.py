"""Where one request's time goes, from the server's own clock: the request's final log line carries it in a `phases`
field (seconds per phase; docs/guide/operating.md "Logs", and the `request_phase_seconds` histogram).

A request runs in `recording()`; code on its thread marks a phase with `with timed("delta"):`. Phases nest, and time
goes to the innermost one only (Delta's change data files written inside the Delta commit count as `change_files`,
not `delta`), so the phases never add up to more than the request's wall time; what no phase covers (gRPC, planning,
the retry digest) is the request's time minus their sum. `add` hands time that passed inside the running phase to
another phase (a Spark job's scheduling and tasks, known once the job returns). Outside a recording every hook does
nothing. A context variable: the request's own thread, not threads it starts.
"""
from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# the fixed set of phase names (a metric label or a log field never takes another)
PHASES = ("load", "decode", "spark_scheduling", "tasks", "spark_results", "commit", "metadata", "change_files",
          "delta", "iceberg", "catalog", "retention")


@dataclass
class _Running:
    name: str
    since: float  # when this phase last resumed (perf_counter)


@dataclass
class Recorder:
    """Seconds per phase of one request."""

    seconds: dict[str, float] = field(default_factory=dict)
    _stack: list[_Running] = field(default_factory=list)

    def _credit(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

    def rounded(self) -> dict[str, float]:
        """The phases that took any time, in PHASES order, in milliseconds' precision."""
        return {name: round(self.seconds[name], 4) for name in PHASES if self.seconds.get(name, 0.0) > 0}


_current: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("request_phases", default=None)


@contextmanager
def recording() -> Iterator[Recorder]:
    """Record the phases of the request running in this block (on this thread)."""
    recorder = Recorder()
    token = _current.set(recorder)
    try:
        yield recorder
    finally:
        _current.reset(token)


@contextmanager
def timed(name: str) -> Iterator[None]:
    """The block's time goes to phase `name`, except what phases nested in it take."""
    recorder = _current.get()
    if recorder is None:
        yield
        return
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; known: {', '.join(PHASES)}")
    now = time.perf_counter()
    if recorder._stack:  # the enclosing phase pauses
        outer = recorder._stack[-1]
        recorder._credit(outer.name, now - outer.since)
    recorder._stack.append(_Running(name, now))
    try:
        yield
    finally:
        now = time.perf_counter()
        running = recorder._stack.pop()
        recorder._credit(running.name, now - running.since)
        if recorder._stack:
            recorder._stack[-1].since = now


def detached(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` with no request recording (in a pool thread running a copy of the request's context: the
    request's own recorder must not be changed by two threads at once)."""
    token = _current.set(None)
    try:
        return fn(*args)
    finally:
        _current.reset(token)


def add(parts: dict[str, float]) -> None:
    """Seconds that just passed, given to the named phases instead of the phase running now (which they are taken
    from, so no time counts twice)."""
    recorder = _current.get()
    if recorder is None:
        return
    for name, seconds in parts.items():
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; known: {', '.join(PHASES)}")
        recorder._credit(name, seconds)
        if recorder._stack:
            recorder._stack[-1].since += max(0.0, seconds)


def spark_job(submitted: float, task_spans: list[tuple[float, float]], done: float) -> None:
    """One Spark job's time split by its tasks' own clock (wall-clock seconds, `time.time()`; the driver's and the
    local workers' clocks are the same clock): submitted → first task start (scheduling), first start → last end
    (tasks), last end → results on the driver. Times outside [submitted, done] (another host's clock) are clamped."""
    if not task_spans:
        add({"spark_scheduling": done - submitted})
        return
    first = min(max(min(start for start, _e in task_spans), submitted), done)
    last = max(min(max(end for _s, end in task_spans), done), first)
    add({"spark_scheduling": first - submitted, "tasks": last - first, "spark_results": done - last})
