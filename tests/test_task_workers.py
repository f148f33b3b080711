"""What a reused Python worker carries from one task to the next: PySpark's daemon collects garbage after every
task, and the heap of the modules the tasks loaded is frozen out of that collection's walk as a task starts; the
Arrow memory a task freed stays mapped for the next task."""
from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from destination.model.table_model import ColumnDef, TableDef
from destination.storage.base import StorageSpec
from destination.write.runner import run_units
from spark_jobs import boundary
from spark_jobs.contracts import JobContext

MODULE_OBJECTS = 50_000  # pyarrow, pyspark and ours alone hold more objects than this once imported


def heap_seen(ctx: JobContext, unit: int) -> tuple[int, int]:
    """The objects frozen, and the objects a collection walks, as the task runs."""
    return gc.get_freeze_count(), len(gc.get_objects())


def test_a_workers_collection_walks_only_what_its_tasks_made(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx = JobContext(storage=StorageSpec(root=str(tmp_path)), base_dir=None, target_dir="t",
                     table=TableDef("t", (ColumnDef("id", "INT", True),)), version=1)
    for frozen, walked in run_units(spark, heap_seen, ctx, list(range(4)), "heap of the workers"):
        assert frozen > MODULE_OBJECTS and walked < frozen / 5, (frozen, walked)


def arrow_memory_faults(ctx: JobContext | None = None, unit: int = 0) -> tuple[int, int]:
    """The process's pid, and the page faults of making 64 Arrow arrays of 8 MiB each (freed as the task ends)."""
    base = pa.array(np.arange(1 << 20, dtype=np.int64))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [pc.add(base, i) for i in range(64)]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del arrays
    return os.getpid(), faults


def test_a_worker_reuses_the_arrow_memory_its_last_task_freed(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Handing freed memory back to the system after each task made the next task fault in every page again (on
    this platform's VMs 2-25 µs a page: two fifths of a uniform change's worker CPU). The oracle: the faults of the
    same arrays made in a fresh process, where no memory can be reused."""
    fresh = int(subprocess.run([sys.executable, "-c", "from tests.test_task_workers import arrow_memory_faults; "
                                "print(arrow_memory_faults()[1])"], capture_output=True, text=True, check=True,
                               cwd=Path(__file__).parent.parent).stdout)
    ctx = JobContext(storage=StorageSpec(root=str(tmp_path)), base_dir=None, target_dir="t",
                     table=TableDef("t", (ColumnDef("id", "INT", True),)), version=1)
    warmed = {pid for pid, _ in run_units(spark, arrow_memory_faults, ctx, list(range(4)), "Arrow memory")}
    again = [(pid, faults) for pid, faults in run_units(spark, arrow_memory_faults, ctx, list(range(4)),
                                                         "Arrow memory again") if pid in warmed]
    assert fresh > 100 and again, (fresh, again)  # 512 MiB: hundreds of pages even as huge pages
    assert all(faults < fresh / 10 for _, faults in again), (fresh, again)
    # and mimalloc never purges what a task freed while the task goes on (in the benchmark's uniform changes the
    # purges after its default 10 ms delay still cost 100,000-150,000 faults per change): Spark hands the setting
    # to every Python worker, local mode's too
    settings = run_units(spark, purge_delay, ctx, list(range(4)), "allocator settings")
    assert settings == ["-1"] * 4


def purge_delay(ctx: JobContext, unit: int) -> str | None:
    return os.environ.get("MIMALLOC_PURGE_DELAY")


class _Node:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Only explicit collections while the test runs; freezing is for a worker process, so the test process gets
    its heap back into the collector afterwards."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


def test_loading_a_module_freezes_the_heap_but_not_its_garbage(unfrozen: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    boundary.freeze_loaded_modules()
    cycle = _Node()
    cycle_alive = weakref.ref(cycle)
    del cycle
    kept = _Node()  # alive when the heap freezes: frozen, not collected
    boundary.freeze_loaded_modules()
    # no module loaded: nothing done (frozen objects leave the collector's lists; the count of frozen ones can only
    # fall, as they are freed)
    assert any(o is kept for o in gc.get_objects()) and cycle_alive() is not None

    monkeypatch.setitem(sys.modules, "a_module_a_task_loaded", sys)
    boundary.freeze_loaded_modules()
    assert cycle_alive() is None  # the garbage cycle was collected, not frozen
    assert all(o is not kept for o in gc.get_objects())  # kept: frozen
