"""Batch files staged for executors that cannot read the server's disk (a Spark master other than local).

The driver copies each file of a request, as sent (still encrypted), into the table root's storage under
`_staging/batch-files/<request>/`, streaming it (the driver never holds a file's bytes), and the tasks read that
copy through the storage layer (`BatchFileRef.staged`). Readers of tables ignore the root's `_`-names. The request's
directory is removed when the write ends, committed or failed; one left by a server that died is removed by the
next staged request on that root once it is older than `STALE_SECONDS` (its name starts with its UTC creation time).
"""
from __future__ import annotations

import calendar
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from destination.runtime import logs
from destination.runtime.errors import BadBatchFile, DestinationError
from destination.storage.base import Storage
from destination.write.batches import BatchPlan
from spark_jobs.contracts import BatchFileRef, StagedCopy

STAGING_DIR = "_staging/batch-files"
STALE_SECONDS = 24 * 3600  # far longer than any write: only a dead server's directory gets this old
COPY_CHUNK = 8 << 20
_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


def stages_files(spark_master: str) -> bool:
    """Executors of a Spark cluster cannot read this machine's disk (local mode runs them in the server's JVM)."""
    return not spark_master.startswith("local")


@contextmanager
def staged_for_executors(plan: BatchPlan, storage: Storage, spark_master: str) -> Iterator[BatchPlan]:
    """`plan` as the write's tasks must see it: its files staged in `storage` with a cluster master, as it is in
    local mode."""
    if not stages_files(spark_master):
        yield plan
        return
    with staged(plan, storage) as staged_plan:
        yield staged_plan


@contextmanager
def staged(plan: BatchPlan, storage: Storage, now: float | None = None) -> Iterator[BatchPlan]:
    """Copy the plan's files into a fresh staging directory of `storage` and yield the plan reading them there;
    the directory is removed when the block ends, whichever way it ends."""
    started = time.time() if now is None else now
    try:
        sweep_stale(storage, started)
    except (DestinationError, OSError) as exc:  # another request's leftovers must not fail this write
        logs.warning(f"could not sweep stale staged batch files under {storage.url(STAGING_DIR)}: {exc}")
    directory = f"{STAGING_DIR}/{request_directory(started)}"
    try:
        yield replace(plan, files=tuple(_stage(ref, storage, directory) for ref in plan.files))
    finally:
        _remove(storage, directory)


def request_directory(now: float) -> str:
    """A request's staging directory name: its UTC creation time (for the sweep), then a unique id."""
    return f"{time.strftime(_TIME_FORMAT, time.gmtime(now))}-{uuid.uuid4().hex}"


def _stage(ref: BatchFileRef, storage: Storage, directory: str) -> BatchFileRef:
    path = f"{directory}/{ref.position:05d}"  # not the file's name: a request may repeat a name in two folders
    try:
        # scratch (durable=False): a crash of the machine ends the request anyway
        with open(ref.path, "rb") as source, storage.open_output(path, durable=False) as sink:
            shutil.copyfileobj(source, sink, COPY_CHUNK)
    except FileNotFoundError as exc:
        raise BadBatchFile(ref.path, "file not found") from exc
    except DestinationError:
        raise
    except OSError as exc:  # the server's own disk: storage errors are translated by open_output
        raise BadBatchFile(ref.path, f"cannot read: {exc.strerror}") from exc
    return replace(ref, staged=StagedCopy(storage=storage.spec, path=path))


def sweep_stale(storage: Storage, now: float) -> list[str]:
    """Remove the staging directories older than STALE_SECONDS (left by a server that died mid-write); their
    names. Names that are not a request directory's are left alone."""
    removed = []
    for name in storage.list_children(STAGING_DIR):
        try:
            created = calendar.timegm(time.strptime(name.split("-", 1)[0], _TIME_FORMAT))
        except ValueError:
            continue
        if now - created > STALE_SECONDS:
            storage.delete_prefix(f"{STAGING_DIR}/{name}")
            removed.append(name)
    if removed:
        logs.info(f"removed {len(removed)} staged batch-file directories older than {STALE_SECONDS // 3600} h "
                  f"under {storage.url(STAGING_DIR)} (writes that never finished)")
    return removed


def _remove(storage: Storage, directory: str) -> None:
    """Remove a request's staging directory; a failure is logged, not raised (it must not hide the write's own
    outcome), and the sweep removes the directory later."""
    try:
        storage.delete_prefix(directory)
    except (DestinationError, OSError) as exc:
        logs.warning(f"could not remove the staged batch files under {storage.url(directory)}: {exc}; "
                     f"they are removed after {STALE_SECONDS // 3600} h by a later write")
