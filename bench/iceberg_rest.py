"""The served Iceberg REST catalog's `loadTable` time on a table of many versions (docs/guide/catalogs.md).

A local table of `--versions` records versions (each one small file, every version kept: its Iceberg metadata then
lists that many snapshots) is written through the store with the Iceberg format on, the catalog is served over it
(destination/iceberg_rest/), and `--loads` `GET .../tables/{table}` requests are timed one after another over one
keep-alive connection (the standard library's http.client: the server's time and the transfer, not a client
library's own; `requests` adds about 7 ms reading a 0.8 MB answer in its 10 KB chunks): the first (the metadata
file read and the answer built), then the median and 95th percentile of the rest (answered from memory, the pointer
re-read at most every 2 s), and the first load after one more commit (the index told by the commit path).

    .venv/bin/python -m bench.iceberg_rest --versions 1000 --loads 2000
"""
from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from destination.iceberg_rest.server import IcebergRestOptions, IcebergRestServer
from destination.iceberg_rest.warehouses import Warehouses
from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk import layout
from destination.on_disk.datafiles import write_data_file
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import Retention, TableStore
from destination.store.versions import PendingVersion, TableVersion, VersionTarget
from destination.table_formats.sync import TableFormatPublisher, table_formats_named
from destination.write.one_step import Produce, commit_one_step

TABLE = TableDef("events", (ColumnDef("id", "LONG", True), ColumnDef("v", "STRING")))
TOKEN = "bench-token"


def replacing(storage: Storage, first: int, rows: int = 10) -> Produce:
    """A version of `rows` new rows in one file, replacing the table's rows (the metadata grows by a snapshot)."""
    def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        data = pa.table({"id": pa.array(range(first, first + rows), pa.int64()),
                         "v": [f"row {i}" for i in range(first, first + rows)],
                         "_destination_meta": pa.nulls(rows, pa.string())})
        new = write_data_file(storage, target.directory, layout.data_file_name(0), data, TABLE, 0)
        return PendingVersion(TABLE, [new], [], {"kind": "bench"})
    return produce


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def run(root: Path, versions: int, loads: int) -> dict[str, float]:
    storage = open_storage(StorageSpec(root=str(root)))
    warehouses = Warehouses(storage)
    observer, dropped = warehouses.watch(storage, lambda event: None)
    store = TableStore(storage, Retention(keep_versions=versions + 1),
                       publish=TableFormatPublisher(table_formats_named(["iceberg"])), observer=observer, dropped=dropped)
    started = time.monotonic()
    for n in range(versions):
        commit_one_step(store, "bench", "events", replacing(storage, n * 10))
    print(f"{versions} versions written in {time.monotonic() - started:.0f} s")
    token = root / "token"
    token.write_text(TOKEN)
    server = IcebergRestServer(warehouses, IcebergRestOptions(0, str(token)), host="127.0.0.1")
    server.start()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    size = 0

    def load() -> float:
        nonlocal size
        began = time.perf_counter()
        connection.request("GET", "/v1/namespaces/bench/tables/events", headers={"Authorization": f"Bearer {TOKEN}"})
        answer = connection.getresponse()
        size = len(answer.read())
        if answer.status != 200:
            raise RuntimeError(f"loadTable answered {answer.status}")
        return time.perf_counter() - began

    try:
        first = load()
        times = [load() for _ in range(loads)]
        commit_one_step(store, "bench", "events", replacing(storage, versions * 10))
        after_commit = load()
    finally:
        connection.close()
        server.stop()
    times.sort()
    result = {"first": first, "median": statistics.median(times), "p95": times[int(len(times) * 0.95)],
              "after_commit": after_commit, "answer_bytes": float(size)}
    print(f"loadTable on {versions} versions ({size / 1e6:.1f} MB answer): first {milliseconds(first)}, median "
          f"{milliseconds(result['median'])}, p95 {milliseconds(result['p95'])} over {loads} loads; first after a "
          f"commit {milliseconds(after_commit)}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-iceberg-rest-") as work:
        run(Path(work), args.versions, args.loads)


if __name__ == "__main__":
    main()
