"""`python -m bench.layouts`: the two version layouts side by side (docs/reference/on-disk-format.md "Layouts and retention").

For each layout, a fresh table on the chosen backend (S3: SeaweedFS on loopback, as the tests start it; local: a
temporary directory) gets an initial load of `--rows` rows and then `--syncs` clustered syncs through a real gRPC
server in this process (Spark local[2]). A clustered sync upserts `--sync-rows` rows whose keys are all near the top
of the key space: a share (`--update-share`, default one half) updates the rows the previous sync inserted (the
initial load's top keys for the first sync), the rest inserts new keys above them (an append-mostly table with recent
rows revised; `--update-share 0`: appends only). Retention is the configuration's (`--keep` versions, `--min-age`
seconds).

With `--table-formats` (e.g. `none;delta,iceberg`) each layout runs once per setting of the `table_formats` field,
and the time spent writing the Delta and Iceberg metadata after each commit is reported too (first and last ten
syncs: it must not grow with the number of versions).

Reported per layout: the commit time of each sync (TableStore's commit step: carry-forward, metadata, commit record,
and the housekeeping after it: `_latest`, claims, retention), the RPC time, the bytes stored under the table's
version directories (on local disk each inode once: hard links cost nothing) against the latest version's data
bytes, and what two kinds of reader see of the latest version: a manifest reader (records-mover, Redshift COPY with
the manifest) and a directory reader (`spark.read.parquet(v<N>/)`, pandas/pyarrow on the directory).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from bench.batches import write_batch_file
from bench.data import Pools, column_names, plain_rows, text_table
from bench.server import create_table, write
from bench.workload import stamp
from destination.on_disk import layout, records
from destination.protocol import sdk_grpc
from destination.runtime.settings import ServerOptions
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.table_formats.sync import TableFormatPublisher

SCHEMA, TABLE = "bench", "clustered"


class MethodClock:
    """Seconds spent in some methods of a class, summed per write (`take`): the bench wraps them in this process
    only, while `installed`."""

    def __init__(self, owner: type, *names: str) -> None:
        self.owner, self.names = owner, names
        self.seconds = 0.0

    @contextmanager
    def installed(self) -> Iterator[None]:
        originals = {name: getattr(self.owner, name) for name in self.names}

        def timed(method: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return method(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - started
            return run
        for name, method in originals.items():
            setattr(self.owner, name, timed(method))
        try:
            yield
        finally:
            for name, method in originals.items():
                setattr(self.owner, name, method)

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


class CommitClock(MethodClock):
    """TableStore's commit step and the housekeeping after it; `formats` the part of it spent bringing the table
    formats up to the commit (TableFormatPublisher)."""

    def __init__(self) -> None:
        super().__init__(TableStore, "_commit", "_finish")
        self.formats = MethodClock(TableFormatPublisher, "__call__")

    @contextmanager
    def installed(self) -> Iterator[None]:
        with super().installed(), self.formats.installed():
            yield


def stored_bytes(storage: Storage, prefix: str) -> int:
    """Bytes of the table's version directories (change directories aside); local hard links counted once."""
    total = 0
    inodes: set[tuple[int, int]] = set()
    for o in storage.list_recursive(prefix):
        if layout.parse_version_dir(o.path[len(prefix) + 1:].split("/", 1)[0]) is None:
            continue
        if storage.spec.is_s3:
            total += o.size
            continue
        st = os.stat(Path(storage.spec.root) / o.path)
        if (st.st_dev, st.st_ino) not in inodes:
            inodes.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def readers(storage: Storage, store: TableStore) -> dict[str, int]:
    """Rows of the latest version seen by a manifest reader and by a directory reader."""
    latest = store.load(SCHEMA, TABLE)
    assert latest is not None
    manifest = json.loads(storage.read_bytes(f"{latest.directory}/{records.MANIFEST}"))
    by_manifest = 0
    for entry in manifest["entries"]:
        with storage.open_input(storage_path(storage, entry["url"])) as source:
            by_manifest += pq.read_metadata(source).num_rows
    directory = ds.dataset(storage.arrow_path(latest.directory), filesystem=storage.arrow_fs, format="parquet")
    return {"table_rows": latest.rows, "manifest_reader_rows": by_manifest,
            "directory_reader_rows": directory.count_rows()}


def storage_path(storage: Storage, url: str) -> str:
    root_url = storage.url("x")[:-1]
    return url[len(root_url):]


def run_layout(stub: Any, configuration: dict[str, str], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    clock = CommitClock()
    pools = Pools.make()
    names = column_names(False)
    storage = open_storage(StorageSpec(root=configuration["root"], s3_endpoint=configuration.get("s3_endpoint", ""),
                                       access_key_id=configuration.get("aws_access_key_id", ""),
                                       secret_access_key=configuration.get("aws_secret_access_key", "")))
    store = TableStore(storage)
    prefix = store.table_prefix(SCHEMA, TABLE)

    def sync(step: int, ids: np.ndarray) -> tuple[float, float, float]:
        batch = write_batch_file(work, f"{configuration['layout']}-{step}",
                                 text_table(plain_rows(ids, step, pools, stamp(step)), names), "replace", "csv")
        started = time.perf_counter()
        write(stub, configuration, SCHEMA, TABLE, [batch], False)
        elapsed = time.perf_counter() - started
        Path(batch.path).unlink()
        return elapsed, clock.take(), clock.formats.take()

    with clock.installed():
        create_table(stub, configuration, SCHEMA, TABLE, False)
        clock.take()
        clock.formats.take()
        sync(0, np.arange(args.rows, dtype=np.int64))
        top = args.rows
        updates = int(args.sync_rows * args.update_share)
        inserts = args.sync_rows - updates
        rpc, commit, formats = [], [], []
        for step in range(1, args.syncs + 1):
            ids = np.concatenate([np.arange(top - updates, top), np.arange(top, top + inserts)]).astype(np.int64)
            top += inserts
            elapsed, committed, followed = sync(step, ids)
            rpc.append(elapsed)
            commit.append(committed)
            formats.append(followed)
    latest = store.load(SCHEMA, TABLE)
    assert latest is not None
    table_bytes = sum(f.bytes for f in latest.files)
    stored = stored_bytes(storage, prefix)
    outside = sum(1 for f in latest.files if f.stored_in is not None)
    return {"layout": configuration["layout"], "table_formats": configuration["table_formats"],
            "formats_median_s": statistics.median(formats), "formats_first10_median_s": statistics.median(formats[:10]),
            "formats_last10_median_s": statistics.median(formats[-10:]),
            "formats_share_of_rpc": statistics.median(f / r for f, r in zip(formats, rpc, strict=True)),
            "version": latest.version, "files": len(latest.files),
            "files_listed_elsewhere": outside, "commit_median_s": statistics.median(commit),
            "commit_max_s": max(commit), "rpc_median_s": statistics.median(rpc), "table_bytes": table_bytes,
            "stored_bytes": stored, "stored_over_table": stored / table_bytes, **readers(storage, store)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("s3", "local"), default="s3")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--sync-rows", type=int, default=2_000)
    parser.add_argument("--syncs", type=int, default=20)
    parser.add_argument("--update-share", type=float, default=0.5, help="share of a sync's rows that are updates")
    parser.add_argument("--keep", type=int, default=2, help="retention_versions")
    parser.add_argument("--min-age", type=float, default=0.0, help="retention_min_age_seconds")
    parser.add_argument("--layouts", default="complete,referencing")
    parser.add_argument("--target-file-size", default="", help="target_file_size (empty: the server's default)")
    parser.add_argument("--table-formats", default="none", help="settings of table_formats to run, separated by ';' "
                                                                "(e.g. 'none;delta,iceberg')")
    args = parser.parse_args(argv)

    from destination.process.spark_session import get_session
    from destination.rpc.server import build_server
    from testbed.s3server import ACCESS_KEY, SECRET_KEY, free_port, start_seaweedfs

    get_session("local[2]")  # before the gRPC server's threads: launching the JVM forks this process
    work = Path(tempfile.mkdtemp(prefix="bench-layouts-"))
    s3 = start_seaweedfs() if args.backend == "s3" else None
    server, _health, _service, port = build_server(ServerOptions(root=str(work / "root"), spark_master="local[2]"),
                                                   free_port())
    server.start()
    import grpc

    stub = sdk_grpc.DestinationConnectorStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    results = []
    try:
        if s3 is not None:
            s3.create_bucket("bench")
        for chosen, formats in [(c, f) for c in args.layouts.split(",") for f in args.table_formats.split(";")]:
            base = {"layout": chosen, "retention_versions": str(args.keep), "table_formats": formats,
                    "retention_min_age_seconds": str(args.min_age), "target_file_size": args.target_file_size}
            if s3 is not None:
                configuration = {**base, "root": f"s3://bench/{uuid.uuid4().hex[:8]}", "s3_endpoint": s3.endpoint,
                                 "aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
            else:
                configuration = {**base, "root": str(work / f"root-{chosen}-{formats.replace(',', '-')}")}
            result = run_layout(stub, configuration, args, work)
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        server.stop(5).wait()
        if s3 is not None:
            s3.stop()
    print(f"\n{args.backend}: {args.rows} rows, {args.syncs} clustered syncs of {args.sync_rows} rows "
          f"({args.update_share:.0%} updates), target file size {args.target_file_size or 'default'}, "
          f"retention {args.keep} versions / {args.min_age:g} s")
    print(f"{'layout':<12} {'formats':<14} {'fmt med':>8} {'fmt 1-10':>8} {'fmt last10':>10} {'fmt/rpc':>7} "
          f"{'commit med':>10} {'commit max':>10} {'rpc med':>8} {'table MB':>9} {'stored MB':>9} "
          f"{'stored/table':>12} {'manifest rows':>13} {'dir rows':>9}")
    for r in results:
        print(f"{r['layout']:<12} {r['table_formats']:<14} {r['formats_median_s']:>7.3f}s "
              f"{r['formats_first10_median_s']:>7.3f}s {r['formats_last10_median_s']:>9.3f}s "
              f"{r['formats_share_of_rpc']:>7.1%} "
              f"{r['commit_median_s']:>9.3f}s {r['commit_max_s']:>9.3f}s {r['rpc_median_s']:>7.2f}s "
              f"{r['table_bytes'] / 1e6:>9.2f} {r['stored_bytes'] / 1e6:>9.2f} {r['stored_over_table']:>12.2f} "
              f"{r['manifest_reader_rows']:>13} {r['directory_reader_rows']:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
