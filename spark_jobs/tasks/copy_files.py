"""The copy task: server-side copies of unchanged files into a complete-layout version (S3 CopyObject).

A copy's time is the object store's, so each task runs its share concurrently too."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from destination.storage.opening import open_storage
from spark_jobs.contracts import CopyUnit, FilesCopied, JobContext

COPY_THREADS = 8  # concurrent copies per task (boto3's connection pool holds 10)


def copy_files_task(ctx: JobContext, unit: CopyUnit) -> FilesCopied:
    started = time.monotonic()
    storage = open_storage(ctx.storage)
    with ThreadPoolExecutor(max_workers=max(1, min(COPY_THREADS, len(unit.pairs)))) as pool:
        for _ in pool.map(lambda pair: storage.copy(*pair), unit.pairs):
            pass
    return FilesCopied(files=len(unit.pairs), seconds=time.monotonic() - started)
