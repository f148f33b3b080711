"""The task side of the driver/task boundary: what Spark calls in a task around a task function.

A task never lets an exception cross into Spark: the exception would reach the driver only as the text of a Java
exception. It returns a `TaskFailure` instead, an error value the driver maps without parsing any text
(destination.write.runner): our own errors travel as themselves (destination.runtime.errors pickles them with their
fields), anything else as its type, its scrubbed message and where it was raised.
"""
from __future__ import annotations

import gc
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from destination.runtime.errors import DestinationError, scrub
from destination.storage.s3 import transient_error
from spark_jobs.contracts import JobContext

U = TypeVar("U")
R = TypeVar("R")
P = TypeVar("P")
FRAMES = 4  # frames of a task's traceback kept for the driver's log


@dataclass(frozen=True, kw_only=True)
class TaskFailure:
    """A task's exception as a value. `error` is set for our own errors; for any other exception the driver
    learns its type name, its message (scrubbed of quoted values) and the last frames of its traceback."""

    error: DestinationError | None
    exception: str  # the exception's type name
    message: str
    where: str  # the last frames of the task's traceback, one line


def failure_of(exc: BaseException) -> TaskFailure:
    frames = traceback.format_tb(exc.__traceback__)[-FRAMES:]
    where = " | ".join(" ".join(line.split()) for frame in frames for line in frame.splitlines())
    # pyarrow's S3 failure that outlasted its retries travels as StorageUnavailable (the driver answers UNAVAILABLE)
    own = exc if isinstance(exc, DestinationError) else transient_error(exc)
    return TaskFailure(error=own, exception=type(exc).__name__, message=scrub(str(exc)), where=where)


_modules_at_freeze = 0  # how many modules this worker process had loaded when it last froze its heap


def freeze_loaded_modules() -> None:
    """PySpark's daemon runs a full garbage collection (`gc.collect()`) after every task of a reused worker, and
    each one walks every object the worker's imported modules hold (pyarrow, polars, botocore, pyiceberg, ours:
    about 90,000): 30-50 ms of CPU per task, more than a small sync's whole merge (a profile of the fleet benchmark
    put the collector at about three fifths of the workers' CPU). When a task has loaded modules, the heap as it
    stands is moved out of the collector's sight (`gc.freeze`): module objects live as long as the worker does.
    The collection before it keeps garbage out of the frozen set (frozen objects are still freed by their
    reference counts; only a cycle among them would never be). Called as a task starts: nothing of the previous
    task is alive then (its result, its error and the frames that raised it are gone), only this task's inputs."""
    global _modules_at_freeze
    if len(sys.modules) == _modules_at_freeze:
        return
    gc.collect()
    gc.freeze()
    _modules_at_freeze = len(sys.modules)


def run_unit(task: Callable[[JobContext, U], R], ctx: JobContext,
             item: tuple[int, U]) -> tuple[int, R | TaskFailure]:
    """One unit (with its index, so results can be put back in unit order)."""
    index, unit = item
    freeze_loaded_modules()
    try:
        return index, task(ctx, unit)
    except Exception as exc:  # every failure crosses the boundary as a value
        return index, failure_of(exc)


def map_unit(task: Callable[[JobContext, U], Iterable[tuple[int, P]]], ctx: JobContext,
             unit: U) -> Iterator[tuple[int, P | TaskFailure]]:
    """The map side of a shuffled job: a failure travels under the key of the first reduce partition (0), so the
    driver sees it among that partition's results."""
    freeze_loaded_modules()
    try:
        yield from task(ctx, unit)
    except Exception as exc:  # every failure crosses the boundary as a value
        yield 0, failure_of(exc)


def reduce_partition(task: Callable[[JobContext, int, list[P]], R], ctx: JobContext,
                     pairs: Iterator[tuple[int, P | TaskFailure]]) -> Iterator[tuple[int, R | TaskFailure]]:
    """The reduce side: each key's payloads, reduced by `task`; a failure from the map side is passed on."""
    freeze_loaded_modules()
    grouped: dict[int, list[P]] = {}
    for key, payload in pairs:
        if isinstance(payload, TaskFailure):
            yield key, payload
            continue
        grouped.setdefault(key, []).append(payload)
    for key, payloads in grouped.items():
        try:
            yield key, task(ctx, key, payloads)
        except Exception as exc:  # every failure crosses the boundary as a value
            yield key, failure_of(exc)
