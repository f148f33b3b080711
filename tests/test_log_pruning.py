"""A commit's cost stays flat over a table's life: with retention retiring versions on every commit, `_log/` keeps the
records of the retained versions only (destination/store/log_pruning.py), the table folder's entries stay bounded,
and a crash at any step of the pruning leaves a table that loads, validates and commits; the readers (records
files, delta-rs, pyiceberg, DuckDB) read every retained version with the model's rows."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from destination.commands.validator import validate_table
from destination.on_disk import layout, records
from destination.on_disk.datafiles import write_data_file
from destination.on_disk.options import COMPLETE, LAYOUTS, TABLE_FORMATS
from destination.storage.base import Storage, StorageError
from destination.store.log_pruning import PRUNING_STEPS
from destination.store.table_store import Retention, TableStore
from destination.store.versions import FaultHook, PendingVersion, TableVersion, VersionTarget
from destination.table_formats.sync import TableFormatPublisher, table_formats_named
from destination.write.one_step import commit_one_step
from tests.lake_readers import delta_duckdb, delta_rs, iceberg_pyiceberg_as_of, rows
from tests.test_table_store import SCHEMA, TABLE, SimulatedCrash

NAME = "events"
COLD = 10  # ids below it: the first version's file, carried by every later version (in the referencing layout a
           # retired directory keeps it, with its commit record pruned)
EAGER = Retention(keep_versions=3, min_age_seconds=0)
STORAGE_CALLS = ("exists", "read_bytes", "write_bytes", "write_all", "create_exclusive", "delete", "delete_prefix",
                 "list_children", "list_recursive", "list_starting_with", "copy")


class Model:
    """The rows the table should hold: a cold part written once, and hot keys that each sync adds to and updates."""

    def __init__(self) -> None:
        self.rows: dict[int, str] = {i: f"cold {i}" for i in range(COLD)}
        self.syncs = 0

    def sync(self) -> None:
        """Two new keys after the largest, and the newest existing key updated."""
        self.syncs += 1
        newest = max(self.rows)
        self.rows[newest] = f"{self.rows[newest]} updated at {self.syncs}"
        self.rows[newest + 1] = f"new at {self.syncs}"
        self.rows[newest + 2] = f"new at {self.syncs}"

    def produce(self, storage: Storage) -> Callable[[TableVersion | None, VersionTarget], PendingVersion]:
        """The version: the cold file (written by the first version, carried since) and one file of the hot rows."""
        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            cold = [f for f in base.files if f.name.startswith("cold")] if base else []
            if base is None:
                cold = [write_data_file(storage, target.directory, layout.data_file_name("cold"),
                                        _table({k: v for k, v in self.rows.items() if k < COLD}), TABLE, None)]
            hot = write_data_file(storage, target.directory, layout.data_file_name("hot"),
                                  _table({k: v for k, v in self.rows.items() if k >= COLD}), TABLE, None)
            return PendingVersion(TABLE, [hot], cold, {"kind": "test"})
        return produce

    def expected(self) -> list[tuple[Any, ...]]:
        return sorted(self.rows.items())


def _table(values: dict[int, str]) -> pa.Table:
    n = len(values)
    return pa.table({"id": pa.array(list(values), pa.int64()), "v": list(values.values()),
                     "_fivetran_synced": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                     "_destination_meta": pa.nulls(n, pa.string())})


def lake_store(storage: Storage, store_layout: str = COMPLETE, fault: FaultHook | None = None) -> TableStore:
    return TableStore(storage, EAGER, fault, layout=store_layout, publish=TableFormatPublisher(table_formats_named(TABLE_FORMATS)))


def sync(store: TableStore, model: Model) -> TableVersion:
    model.sync()
    committed = commit_one_step(store, SCHEMA, NAME, model.produce(store.storage))
    assert committed is not None
    return committed


def log_names(storage: Storage) -> list[str]:
    return storage.list_children(f"{layout.table_prefix(SCHEMA, NAME)}/_log")


def count_calls(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every storage call from now on, by method, and the entries listings return (`listed`)."""
    counts: Counter[str] = Counter()
    for name in STORAGE_CALLS:
        real = getattr(storage, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            counts[_name] += 1
            result = _real(*args, **kwargs)
            if _name.startswith("list_"):
                result = list(result)
                counts["listed"] += len(result)
            return result
        monkeypatch.setattr(storage, name, counted)
    return counts


@pytest.mark.integration  # hundreds of commits: a workload, not the quick tier
@pytest.mark.parametrize("store_layout", LAYOUTS)
def test_commit_300_costs_what_commit_30_does_and_the_table_folder_stays_bounded(
        storage: Storage, store_layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    last = 50 if storage.spec.is_s3 else 300  # on S3 a commit with both formats takes about a second
    store = lake_store(storage, store_layout)
    model = Model()
    per_commit: dict[int, Counter[str]] = {}
    folder_sizes: list[int] = []
    prefix = layout.table_prefix(SCHEMA, NAME)
    for n in range(1, last + 1):
        counts = count_calls(storage, monkeypatch)
        assert sync(store, model).version == n
        per_commit[n] = counts
        monkeypatch.undo()
        folder_sizes.append(len(list(storage.list_recursive(prefix))))
    # commits 30 and `last` both write a Delta checkpoint (every tenth version): the same requests, and listings of
    # the same length but for a claim or hint another thread of the commit is removing or writing meanwhile (±2)
    for late, early in ((last, 30), (last - 9, 21)):
        assert _without_listed(per_commit[late]) == _without_listed(per_commit[early]), (per_commit[early], per_commit[late])
        assert abs(per_commit[late]["listed"] - per_commit[early]["listed"]) <= 2, (per_commit[early], per_commit[late])
    assert max(folder_sizes[last - 20:]) == max(folder_sizes[20:40]), folder_sizes[::10]
    kept = sorted(n for n in log_names(storage) if n.endswith(".json") and not n.startswith("_"))
    assert kept == [f"{n:020d}.json" for n in range(last - 2, last + 1)], "the records of the retained versions only"
    summary = json.loads(storage.read_bytes(layout.pruned_log_path(prefix)))
    assert summary == {"first_record": last - 2, "deleting_from": last - 3}
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []
    latest = TableStore(storage).load(SCHEMA, NAME)
    assert latest is not None and latest.version == last
    assert sorted_rows(read_records(storage, latest)) == model.expected()


def _without_listed(counts: Counter[str]) -> Counter[str]:
    return Counter({name: n for name, n in counts.items() if name != "listed"})


def sorted_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(rows(table, ["id", "v"]))


def read_records(storage: Storage, version: TableVersion, columns: tuple[str, ...] = ("id", "v")) -> pa.Table:
    """The version's rows as a records reader takes them: every file its `_manifest` names."""
    manifest = json.loads(storage.read_bytes(f"{version.directory}/{records.MANIFEST}"))
    table_url = storage.url(version.prefix)
    return pa.concat_tables([
        pq.read_table(pa.BufferReader(storage.read_bytes(version.prefix + e["url"][len(table_url):])),
                      columns=list(columns)) for e in manifest["entries"]])


@pytest.mark.integration  # hundreds of commits: a workload, not the quick tier
def test_readers_read_every_retained_version_after_a_thousand_small_syncs(tmp_path: Any) -> None:
    from destination.storage.opening import open_storage
    from tests.conftest import spec_of
    storage = open_storage(spec_of({"root": str(tmp_path / "root")}))
    store = lake_store(storage)
    model = Model()
    expected: dict[int, list[tuple[Any, ...]]] = {}
    for n in range(1, 1_003):
        sync(store, model)
        expected[n] = model.expected()
    prefix = layout.table_prefix(SCHEMA, NAME)
    assert len(log_names(storage)) == EAGER.keep_versions + 1  # the retained versions' records and the summary
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []
    url = storage.url(prefix)
    fresh = TableStore(storage)
    for n in range(1_000, 1_003):
        version = fresh.load(SCHEMA, NAME, n)
        assert version is not None
        assert sorted_rows(read_records(storage, version)) == expected[n], f"records v{n}"
        assert sorted_rows(delta_rs(storage.spec, url, n)) == expected[n], f"delta-rs v{n}"
        assert sorted_rows(delta_duckdb(storage.spec, url, n)) == expected[n], f"duckdb v{n}"
        assert sorted_rows(iceberg_pyiceberg_as_of(storage.spec, url, n)) == expected[n], f"pyiceberg v{n}"
    assert fresh.load(SCHEMA, NAME, 999) is None, "a retired version is not readable"


@pytest.mark.parametrize("store_layout", LAYOUTS)
@pytest.mark.parametrize("step", PRUNING_STEPS)
def test_a_crash_at_each_step_of_the_pruning_leaves_a_table_that_loads_repairs_and_commits(
        storage: Storage, step: str, store_layout: str) -> None:
    model = Model()
    store = lake_store(storage, store_layout)
    for _ in range(6):
        sync(store, model)
    crashed = []

    def crash(at: str) -> None:
        if at == step and not crashed:
            crashed.append(at)
            raise SimulatedCrash(at)
    with pytest.raises(SimulatedCrash):
        sync(lake_store(storage, store_layout, crash), model)
    assert crashed == [step]
    after = lake_store(storage, store_layout)  # a restarted process
    latest = after.load(SCHEMA, NAME)
    assert latest is not None and latest.version == 7
    assert after.repair(SCHEMA, NAME) is None
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []
    for _ in range(2):
        committed = sync(after, model)
    assert committed.version == 9 and sorted_rows(read_records(storage, committed)) == model.expected()
    assert sorted(n for n in log_names(storage) if n.endswith(".json") and not n.startswith("_")) \
        == [f"{n:020d}.json" for n in range(7, 10)], "a pruning cut short is finished by the next one"
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []
    url = storage.url(layout.table_prefix(SCHEMA, NAME))
    assert sorted_rows(delta_rs(storage.spec, url, 9)) == model.expected()
    assert sorted_rows(iceberg_pyiceberg_as_of(storage.spec, url, 9)) == model.expected()


def test_a_table_that_lost_its_latest_hint_is_found_past_its_pruned_records(storage: Storage) -> None:
    store = lake_store(storage)
    model = Model()
    for _ in range(8):
        sync(store, model)
    prefix = layout.table_prefix(SCHEMA, NAME)
    storage.delete(layout.latest_path(prefix))
    fresh = TableStore(storage, EAGER)
    assert fresh.latest_version_number(prefix) == 8
    latest = fresh.load(SCHEMA, NAME)
    assert latest is not None and latest.version == 8
    assert sync(fresh, model).version == 9


def test_commits_whose_latest_hint_failed_prune_nothing_a_load_steps_through(storage: Storage) -> None:
    """`_latest` not written by five commits in a row (storage refused it: a warning, the commits stand) while
    retention retires a version every commit: a restarted process still steps from the old hint to the latest
    version, and the next commit that moves the hint prunes as before."""
    model = Model()
    for _ in range(3):
        sync(lake_store(storage), model)

    def refuse_latest(at: str) -> None:
        if at == "before_latest":
            raise StorageError("the test's storage refuses `_latest`")
    failing = lake_store(storage, fault=refuse_latest)
    for _ in range(5):
        sync(failing, model)
    prefix = layout.table_prefix(SCHEMA, NAME)
    assert json.loads(storage.read_bytes(layout.latest_path(prefix)))["version"] == 3
    fresh = lake_store(storage)  # a restarted process
    latest = fresh.load(SCHEMA, NAME)
    assert latest is not None and latest.version == 8
    assert sorted_rows(read_records(storage, latest)) == model.expected()
    assert sync(fresh, model).version == 9
    assert sorted(n for n in log_names(storage) if n.endswith(".json") and not n.startswith("_")) \
        == [f"{n:020d}.json" for n in range(7, 10)]


def test_an_unreadable_summary_is_a_problem_validate_names(storage: Storage) -> None:
    store = lake_store(storage)
    model = Model()
    for _ in range(6):
        sync(store, model)
    storage.write_bytes(layout.pruned_log_path(layout.table_prefix(SCHEMA, NAME)), b"{not json")
    problems = validate_table(storage, SCHEMA, NAME, EAGER)
    assert problems[0].startswith("_log/_pruned.json: unreadable summary of the pruned commit records")
    assert any("commit record missing" in p for p in problems[1:])
