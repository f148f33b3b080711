"""Many small syncs across several tables, several calls in flight, as Fivetran sends them: writes to different
tables commit in whatever order they finish, a retried request changes nothing, and after the rounds every table's
records rows, its Delta Lake and Iceberg readings and the replay of its change files all equal a model of the syncs
written here, apart from the server (a dict per table)."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from destination.on_disk import layout
from destination.protocol import sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from tests.batchfiles import write_csv
from tests.change_consumer import replay
from tests.conftest import spec_of
from tests.lake_readers import delta_rs, iceberg_pyiceberg, rows
from tests.rpc_helpers import rows_of, table
from tests.test_write_path import KEY, SYS, U, create, params

TABLES = 6
ROUNDS = 4
IN_FLIGHT = 4
SYNC_ROWS = 40
TS = "2024-03-01T00:00:00Z"


def _row(key: int, value: str, deleted: bool = False) -> dict[str, Any]:
    return {"id": str(key), "v": value, "n": str(key * 3), "_fivetran_synced": TS,
            "_fivetran_deleted": "true" if deleted else "false"}


class Syncs:
    """The rounds' requests for one table and the rows they must leave (the model)."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.random = random.Random(seed)
        self.model: dict[int, tuple[str, int, bool]] = {}
        self.next_key = 0

    def request(self, configuration: dict[str, str], folder: Path, round_no: int) -> sdk.WriteBatchRequest:
        """Mostly new keys, some upserts of recent keys; an update file (partial rows: `n` unmodified) every other
        round, a delete file every third, as the fleet benchmark's syncs."""
        t = table(self.name, [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
        request = sdk.WriteBatchRequest(configuration=configuration, schema_name="fleet", table=t, file_params=params())
        live = sorted(self.model)
        replace = [_row(self.next_key + i, f"r{round_no}") for i in range(SYNC_ROWS)]
        self.next_key += SYNC_ROWS
        recent = live[-SYNC_ROWS:]
        replace += [_row(k, f"u{round_no}") for k in self.random.sample(recent, min(5, len(recent)))]
        files: dict[str, list[dict[str, Any]]] = {"replace": replace}
        if round_no % 2 and live:
            files["update"] = [{**_row(k, f"p{round_no}"), "n": U} for k in self.random.sample(live, min(3, len(live)))]
        if round_no % 3 == 2 and live:
            files["delete"] = [{"id": str(k), "v": None, "n": None, "_fivetran_synced": TS, "_fivetran_deleted": None}
                               for k in self.random.sample(live, min(4, len(live)))]
        cols = [c.name for c in t.columns]
        for kind in ("replace", "update", "delete"):  # the order the server applies them in
            for r in files.get(kind, []):
                key = int(r["id"])
                if kind == "replace":
                    self.model[key] = (r["v"], key * 3, False)
                elif kind == "update" and key in self.model:
                    self.model[key] = (r["v"], self.model[key][1], False)
                elif kind == "delete":
                    self.model.pop(key, None)
            if files.get(kind):
                path = write_csv(folder / f"{self.name}-{round_no}-{kind}.csv.zstd.aes", cols, files[kind], KEY)
                getattr(request, f"{kind}_files").append(str(path))
                request.keys[str(path)] = KEY
        return request


def test_small_syncs_in_flight_across_tables_end_as_the_model(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    configuration = {**configuration, "changes": "parquet"}
    tables = [Syncs(f"t{i}", seed=i) for i in range(TABLES)]
    for syncs in tables:
        create(stub, configuration, "fleet", table(syncs.name, [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS]))
    storage = open_storage(spec_of(configuration))
    store = TableStore(storage)
    shuffle = random.Random(7)
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        for round_no in range(ROUNDS):
            folder = tmp_path / f"round{round_no}"
            folder.mkdir()
            requests = [(s, s.request(configuration, folder, round_no)) for s in tables]
            shuffle.shuffle(requests)  # submitted in another order each round: commits land in any order
            answers = list(pool.map(lambda pair: stub.WriteBatch(pair[1]), requests))
            assert all(a.WhichOneof("response") == "success" for a in answers), answers
            # a retried request (the answer lost on the way back) is answered success and changes nothing
            retried_table, retried = requests[round_no % len(requests)]
            before = store.load("fleet", retried_table.name)
            assert before is not None
            assert stub.WriteBatch(retried).WhichOneof("response") == "success"
            after = store.load("fleet", retried_table.name)
            assert after is not None and after.version == before.version
    for syncs in tables:
        expected = sorted((k, v, n, d) for k, (v, n, d) in syncs.model.items())
        got = sorted((r["id"], r["v"], r["n"], r["_fivetran_deleted"])
                     for r in rows_of(configuration, "fleet", syncs.name))
        assert got == expected, syncs.name
        latest = store.load("fleet", syncs.name)
        assert latest is not None
        assert latest.version == 1 + ROUNDS  # CreateTable, then one version per sync: retries wrote none
        url = storage.url(layout.table_prefix("fleet", syncs.name))
        columns = ["id", "v", "n", "_fivetran_deleted"]
        assert rows(delta_rs(storage.spec, url), columns) == rows(iceberg_pyiceberg(storage.spec, url), columns) == \
            rows([{"id": k, "v": v, "n": n, "_fivetran_deleted": d} for k, v, n, d in expected], columns), syncs.name
        replica = replay(storage, "fleet", syncs.name)
        assert sorted((row["id"], row["v"], row["n"], row["_fivetran_deleted"]) for row in replica.rows.values()) \
            == expected, syncs.name
