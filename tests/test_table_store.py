"""The table store on both backends: atomic commits under crashes, racing writers, retention."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import pyarrow as pa
import pytest

from destination.commands.validator import validate_version
from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk import layout
from destination.on_disk.datafiles import align, read_data_file, write_data_file, write_sorted_files
from destination.on_disk.locations import file_dir
from destination.runtime.pools import Started
from destination.storage.base import Storage
from destination.store.table_store import Retention, TableStore
from destination.store.versions import CommitEvent, PendingVersion, TableVersion, VersionTarget
from destination.write.one_step import commit_one_step

TABLE = TableDef("events", (ColumnDef("id", "LONG", True), ColumnDef("v", "STRING"),
                            ColumnDef("_fivetran_synced", "UTC_DATETIME")))
SCHEMA = "my schema"


class SimulatedCrash(BaseException):
    """Raised at a commit step; a BaseException so no cleanup runs, as when the process dies."""


def appender(storage: Storage, first_id: int, n: int = 3):  # type: ignore[no-untyped-def]
    """A produce() that adds n new rows as one new file and carries every existing file."""
    def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        rows = pa.table({"id": pa.array(range(first_id, first_id + n), pa.int64()),
                         "v": [f"row {i}" for i in range(first_id, first_id + n)],
                         "_fivetran_synced": pa.array([1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC")),
                         "_destination_meta": pa.nulls(n, pa.string())})
        new = write_data_file(storage, target.directory, layout.data_file_name(first_id % 16), rows, TABLE, first_id % 16)
        return PendingVersion(TABLE, [new], list(base.files) if base else [], {"kind": "test"})
    return produce


def ids(store: TableStore, version: TableVersion) -> list[int]:
    parts = [align(read_data_file(store.storage, file_dir(version.directory, f), f.name), version.table) for f in version.files]
    return sorted(pa.concat_tables(parts).column("id").to_pylist()) if parts else []


def test_versions_are_complete_records_directories(store: TableStore) -> None:
    commit_one_step(store, SCHEMA, "events", lambda base, target: PendingVersion(TABLE, [], [], {"kind": "create"}))
    empty = store.load(SCHEMA, "events")
    assert empty is not None and empty.version == 1 and empty.rows == 0
    assert len(empty.files) == 1 and empty.files[0].rows == 0  # one zero-row data file
    assert validate_version(store.storage, empty.directory) == []
    v2 = commit_one_step(store, SCHEMA, "events", appender(store.storage, 1))
    assert v2 is not None and v2.version == 2 and ids(store, v2) == [1, 2, 3]
    assert validate_version(store.storage, v2.directory) == []
    latest = json.loads(store.storage.read_bytes(layout.latest_path(layout.table_prefix(SCHEMA, "events"))))
    assert latest["version"] == 2 and latest["directory"] == "v00000000000000000002"
    names = store.storage.list_children(v2.directory)
    assert not any(n.startswith("empty-") for n in names), "the empty table's placeholder is gone once rows exist"


@pytest.mark.parametrize("step", ["after_data_files", "before_commit_record", "after_commit_record"])
def test_crash_at_each_commit_step(storage: Storage, step: str) -> None:
    armed = []

    def crash_once(at: str) -> None:
        if at == step and armed == [True]:
            armed.append(False)
            raise SimulatedCrash(at)

    store = TableStore(storage, fault=crash_once)
    commit_one_step(store, SCHEMA, "events", appender(storage, 1))
    armed.append(True)
    with pytest.raises(SimulatedCrash):
        commit_one_step(store, SCHEMA, "events", appender(storage, 10))
    after = store.load(SCHEMA, "events")
    assert after is not None
    if step == "after_commit_record":  # the commit point was passed: the version is visible
        assert after.version == 2 and ids(store, after) == [1, 2, 3, 10, 11, 12]
    else:  # not committed: the previous version is intact and still the one readers see
        assert after.version == 1 and ids(store, after) == [1, 2, 3]
    assert validate_version(storage, after.directory) == []
    final = commit_one_step(store, SCHEMA, "events", appender(storage, 20))  # the next write succeeds
    assert final is not None and final.version == after.version + 1
    assert ids(store, final) == sorted(ids(store, after) + [20, 21, 22])
    assert validate_version(storage, final.directory) == []


def test_a_crashed_writer_of_another_process_is_taken_over_after_its_lease(storage: Storage) -> None:
    crashed = TableStore(storage, fault=lambda at: (_ for _ in ()).throw(SimulatedCrash(at)) if at == "before_commit_record" else None)
    commit_one_step(TableStore(storage), SCHEMA, "events", appender(storage, 1))
    with pytest.raises(SimulatedCrash):
        commit_one_step(crashed, SCHEMA, "events", appender(storage, 10))
    other = TableStore(storage, claim_lease_seconds=0.0)  # the crashed writer's lease has run out
    done = commit_one_step(other, SCHEMA, "events", appender(storage, 20))
    assert done is not None and done.version == 2 and ids(other, done) == [1, 2, 3, 20, 21, 22]
    assert validate_version(storage, done.directory) == []


def test_two_concurrent_writers_lose_nothing(storage: Storage) -> None:
    commit_one_step(TableStore(storage), SCHEMA, "events", lambda base, target: PendingVersion(TABLE, [], [], {"kind": "create"}))
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        store = TableStore(storage)  # its own writer identity, like another server process
        try:
            for i in range(6):
                commit_one_step(store, SCHEMA, "events", appender(storage, offset + i * 10, 2))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(o,)) for o in (1000, 2000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = TableStore(storage)
    latest = store.load(SCHEMA, "events")
    assert latest is not None and latest.version == 13
    expected = sorted(o + i * 10 + k for o in (1000, 2000) for i in range(6) for k in range(2))
    assert ids(store, latest) == expected
    assert validate_version(storage, latest.directory) == []


def test_retention_keeps_recent_versions_and_readers_of_old_ones(storage: Storage) -> None:
    patient = TableStore(storage, Retention(keep_versions=2, min_age_seconds=3600))
    for i in range(4):
        commit_one_step(patient, SCHEMA, "events", appender(storage, i * 10))
    prefix = layout.table_prefix(SCHEMA, "events")
    assert [layout.parse_version_dir(n) for n in storage.list_children(prefix) if n.startswith("v")] == [1, 2, 3, 4]
    reader_view = patient.load(SCHEMA, "events", version=1)  # a reader still on version 1 can read it
    assert reader_view is not None and ids(patient, reader_view) == [0, 1, 2]
    eager = TableStore(storage, Retention(keep_versions=2, min_age_seconds=0))
    commit_one_step(eager, SCHEMA, "events", appender(storage, 100))
    assert [layout.parse_version_dir(n) for n in storage.list_children(prefix) if n.startswith("v")] == [4, 5]
    latest = eager.load(SCHEMA, "events")
    assert latest is not None and ids(eager, latest) == [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32, 100, 101, 102]
    assert validate_version(storage, latest.directory) == []


def test_an_attempt_whose_commit_conflicts_begins_again_on_a_fresh_base(storage: Storage) -> None:
    """A try whose commit fails commits nothing and says so (None); the write begins again after it, and commits on
    the same base; an attempt with nothing to commit is abandoned, leaving its claim to no one."""
    store = TableStore(storage)
    commit_one_step(store, SCHEMA, "events", appender(storage, 1))
    first = store.begin(SCHEMA, "events")
    assert first.base is not None and first.base.version == 1 and first.target.version == 2
    pending = appender(storage, 10)(first.base, first.target)
    # a file the version lists is missing at commit: nothing is committed, the write begins again
    pending.new_files = [replace(f, name="gone.parquet") for f in pending.new_files]
    assert store.commit(first, pending) is None
    assert len(first.conflicts) == 1 and store.load(SCHEMA, "events").version == 1  # type: ignore[union-attr]
    second = store.begin(SCHEMA, "events", after=first)
    assert second.base is not None and second.base.version == 1 and second.target.version == 2
    committed = store.commit(second, appender(storage, 20)(second.base, second.target))
    assert committed is not None and committed.version == 2
    assert ids(store, committed) == [1, 2, 3, 20, 21, 22]
    nothing = store.begin(SCHEMA, "events")
    store.abandon(nothing)
    prefix = store.table_prefix(SCHEMA, "events")
    assert not storage.exists(layout.claim_path(prefix, 3)) and store.load(SCHEMA, "events") == committed


def test_a_leftover_claimed_version_is_cleared_by_the_next_writer(storage: Storage) -> None:
    """An unfinished version (claim + files, no commit record) never becomes visible and is replaced."""
    store = TableStore(storage, Retention(keep_versions=2, min_age_seconds=3600))
    commit_one_step(store, SCHEMA, "events", appender(storage, 1))
    prefix = layout.table_prefix(SCHEMA, "events")
    storage.write_bytes(layout.claim_path(prefix, 2), json.dumps({"writer": store.writer_id, "at": 0}).encode())
    storage.write_bytes(f"{prefix}/v00000000000000000002/orphan.parquet", b"junk")
    assert store.load(SCHEMA, "events").version == 1  # type: ignore[union-attr]
    done = commit_one_step(store, SCHEMA, "events", appender(storage, 10))
    assert done is not None and done.version == 2
    assert "orphan.parquet" not in storage.list_children(done.directory)
    assert validate_version(storage, done.directory) == []
    assert not storage.exists(layout.claim_path(prefix, 2))


def test_a_busy_table_lock_taken_with_a_timeout_is_a_commit_conflict() -> None:
    from destination.rpc.table_locks import TableLocks
    from destination.runtime.errors import CommitConflict

    locks = TableLocks()
    with locks.hold("root", "s", "target"):
        with pytest.raises(CommitConflict, match=r"s\.target is busy"), locks.hold("root", "s", "target", timeout=0.01):
            pass
        with locks.hold("root", "s", "other", timeout=0.01):  # another table is free
            pass
    with locks.hold("root", "s", "target", timeout=0.01):  # released again
        pass


@pytest.mark.parametrize("writer", ["one file", "sorted files"])
def test_only_columns_whose_values_repeat_are_dictionary_encoded(storage: Storage, writer: str) -> None:
    """Dictionary encoding where values repeat (a city, a flag), plain where they are mostly distinct (an id, an
    email): the choice that halved the write of a data file. The values read back unchanged either way."""
    import pyarrow.parquet as pq

    table_def = TableDef("t", (ColumnDef("id", "LONG", primary_key=True), ColumnDef("email", "STRING"),
                               ColumnDef("city", "STRING")))
    n = 50_000
    rows = pa.table({"id": pa.array(range(n), pa.int64()), "email": [f"user{i}@example.com" for i in range(n)],
                     "city": [("Oslo", "Lima", "Pune")[i % 3] for i in range(n)]})
    rows = align(rows, table_def)  # and the destination's own column, NULL
    if writer == "one file":
        names = [write_data_file(storage, "d", "f.parquet", rows, table_def, None).name]
    else:
        names = [f.name for f in write_sorted_files(storage, "d", rows, table_def, 64 << 20)]
    with storage.open_input(f"d/{names[0]}") as source:
        footer = pq.read_metadata(source)
    encodings = {footer.schema.column(i).name: footer.row_group(0).column(i).encodings
                 for i in range(footer.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["city"])
    assert not any("DICTIONARY" in e for e in encodings["id"] + encodings["email"])
    assert read_data_file(storage, "d", names[0]).equals(rows)


def test_the_dictionary_choice_counts_distinct_values_of_the_sample_without_nulls() -> None:
    """The rule at its edge, against a model in plain Python: a column is dictionary encoded when at most half of
    the sample's rows hold distinct non-NULL values; NULLs, however many, are not a value of their own."""
    from destination.on_disk.datafiles import DICTIONARY_SAMPLE_ROWS, dictionary_columns

    n = DICTIONARY_SAMPLE_ROWS
    half = n // 2
    columns = {
        "half_and_nulls": [None if i % 2 else f"v{i}" for i in range(n)],  # n/2 distinct values, n/2 NULLs
        "one_over_half": [f"v{i}" if i <= half else "same" for i in range(n)],  # n/2 + 2 distinct values
        "half_exactly": [i // 2 for i in range(n)],
        "all_null": [None] * n,
        "floats": [(-0.0 if i % 3 else 0.0) if i % 2 else float(i) for i in range(n)],
    }
    tails = {"half_and_nulls": [f"t{i}" for i in range(100)], "one_over_half": [f"t{i}" for i in range(100)],
             "half_exactly": list(range(n, n + 100)), "all_null": [f"t{i}" for i in range(100)],
             "floats": [float(n + i) for i in range(100)]}  # distinct values after the sample: they do not count
    table = pa.table({name: pa.array(values + tails[name], pa.string() if name == "all_null" else None)
                      for name, values in columns.items()})

    def model(values: list[object]) -> bool:
        distinct = {(v, str(v)) for v in values if v is not None}  # Arrow tells 0.0 and -0.0 apart, as str does
        return len(distinct) * 2 <= len(values)

    expected = [name for name, values in columns.items() if model(values)]
    assert expected == ["half_and_nulls", "half_exactly", "all_null"]  # the model itself, at the rule's edge
    assert dictionary_columns(table) == expected


def test_a_writer_whose_claim_was_taken_over_leaves_the_takers_version_as_committed(store: TableStore) -> None:
    """A writer that outlived its claim (another writer took the version over and committed it while this one
    prepared it) must not write its metadata into the committed version's directory: it finds the claim lost before
    writing anything there and redoes its work on the new base."""
    storage = store.storage
    commit_one_step(store, SCHEMA, "events", appender(storage, 1))
    tries: list[int] = []

    def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        assert base is not None
        tries.append(base.version)
        if len(tries) == 1:  # meanwhile a writer that sees our claim as stale takes version 2 over and commits it
            taker = commit_one_step(TableStore(storage, claim_lease_seconds=0.0), SCHEMA, "events", appender(storage, 100))
            assert taker is not None and taker.version == 2
        return appender(storage, 10 * len(tries))(base, target)

    committed = commit_one_step(store, SCHEMA, "events", produce)
    assert committed is not None and committed.version == 3 and tries == [1, 2]
    second = store.load(SCHEMA, "events", version=2)
    assert second is not None
    assert ids(store, second) == [1, 2, 3, 100, 101, 102]  # the taker's version, as it committed it
    assert validate_version(storage, second.directory) == []
    latest = store.load(SCHEMA, "events")
    assert latest is not None and ids(store, latest) == [1, 2, 3, 20, 21, 22, 100, 101, 102]


def test_retention_skips_its_listings_until_a_version_can_retire_then_retires_it(storage: Storage,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that finds the oldest candidate too young remembers when it can go: the commits before that list
    nothing for retention (the table's folder is listed by it alone here) and tell the follow step the same oldest
    retained version; the first commit after it retires the versions that have aged, as a pass always did."""
    age = 1.5
    told: list[int] = []
    store = TableStore(storage, Retention(keep_versions=2, min_age_seconds=age),
                       publish=lambda st, prefix, committed, oldest: told.append(oldest) or True)
    prefix = layout.table_prefix(SCHEMA, "events")
    listings: list[str] = []
    list_children = storage.list_children
    monkeypatch.setattr(storage, "list_children",
                        lambda path: listings.append(path) or list_children(path))  # type: ignore[func-returns-value]
    for i in range(3):
        commit_one_step(store, SCHEMA, "events", appender(storage, i * 10))
    passes = listings.count(prefix)
    assert told == [1, 1, 1] and passes == 3  # version 1, the first candidate, too young at version 3
    commit_one_step(store, SCHEMA, "events", appender(storage, 30))
    commit_one_step(store, SCHEMA, "events", appender(storage, 40))
    assert listings.count(prefix) == passes  # versions 4 and 5: within version 1's age, no pass
    assert told == [1, 1, 1, 1, 1]
    assert all(storage.exists(f"{layout.version_dir(prefix, n)}/_files.json") for n in range(1, 6))
    time.sleep(age + 0.1)  # every version's successor committed more than `age` ago
    commit_one_step(store, SCHEMA, "events", appender(storage, 50))
    assert listings.count(prefix) == passes + 1 and told[-1] == 5
    retired = [n for n in range(1, 7) if not storage.exists(f"{layout.version_dir(prefix, n)}/_files.json")]
    assert retired == [1, 2, 3, 4]  # a retired version loses its metadata (its directory too, in the complete layout)
    latest = store.load(SCHEMA, "events")
    assert latest is not None and ids(store, latest)[-3:] == [50, 51, 52]


def test_retention_tells_committed_versions_from_leftovers_by_their_commit_records(storage: Storage) -> None:
    """Retention's check of which version directories committed (on S3 one listing of the window's commit records,
    not a HEAD each) agrees with each record's existence, a version whose record is gone among them."""
    store = TableStore(storage, Retention(keep_versions=2, min_age_seconds=3600))
    for i in range(7):
        commit_one_step(store, SCHEMA, "events", appender(storage, i * 10))
    prefix = layout.table_prefix(SCHEMA, "events")
    storage.delete(layout.log_path(prefix, 3))
    candidates = list(range(1, 7))
    oracle = {n for n in candidates if storage.exists(layout.log_path(prefix, n))}
    assert oracle == {1, 2, 4, 5, 6}
    assert store._retention._committed(prefix, candidates) == oracle
    assert store._retention._committed(prefix, [5, 6]) == {5, 6}


def test_a_kept_latest_version_is_used_only_while_latest_names_it(storage: Storage) -> None:
    """A store keeps the latest version it loaded or committed (committed versions never change) and serves it
    again while `_latest` names that very version: after another process drops the table and creates it again up
    to the same version number, with another definition, the first store reads the new one. (Here the kept
    version's files are gone too, so its listing alone would catch it; the commit time is what tells the two
    apart where the files would not.)"""
    mine, other = TableStore(storage), TableStore(storage)
    commit_one_step(mine, SCHEMA, "events", lambda base, target: PendingVersion(TABLE, [], [], {"kind": "create"}))
    commit_one_step(mine, SCHEMA, "events", appender(storage, 1))
    kept = mine.load(SCHEMA, "events")
    assert kept is not None and kept.version == 2 and ids(mine, kept) == [1, 2, 3]

    other.drop(SCHEMA, "events")
    wider = replace(TABLE, columns=(*TABLE.columns, ColumnDef("extra", "INT")))
    for _ in range(2):  # versions 1 and 2 again
        commit_one_step(other, SCHEMA, "events", lambda base, target: PendingVersion(wider, [], [], {"kind": "create"}))
    again = mine.load(SCHEMA, "events")
    assert again is not None and again.version == 2
    assert [c.name for c in again.table.columns] == [c.name for c in wider.columns]  # not the kept definition
    assert ids(mine, again) == []
    assert mine.load(SCHEMA, "events") == again  # and now that one is kept


def test_a_commit_stands_when_the_server_stops_before_its_housekeeping(storage: Storage,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the commit record, `_latest` and the claims' clean-up go to a thread pool; a stopping interpreter's
    pools take no more work (concurrent.futures' RuntimeError): the write still answers with its version, and
    readers step forward to it from `_latest`."""
    import destination.store.commit as commit

    store = TableStore(storage)
    commit_one_step(store, SCHEMA, "events", appender(storage, 1))

    real = commit.start

    def stopping(name: str, workers: int, calls: Sequence[Callable[[], object]]) -> Started:
        if name == "commit-housekeeping":  # the pool the work after the commit record goes to
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        return real(name, workers, calls)

    monkeypatch.setattr(commit, "start", stopping)
    second = commit_one_step(store, SCHEMA, "events", appender(storage, 10))
    assert second is not None and second.version == 2
    monkeypatch.undo()
    latest = TableStore(storage).load(SCHEMA, "events")
    assert latest is not None and latest.version == 2 and ids(store, latest) == [1, 2, 3, 10, 11, 12]


def test_the_kept_versions_are_bounded_by_tables_and_files(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server writing to many tables keeps the latest versions of the most recently used ones only: at most
    KNOWN_TABLES tables and, past KNOWN_FILES data files in all, fewer (the memory stays bounded over weeks)."""
    import destination.store.loading as loading

    monkeypatch.setattr(loading, "KNOWN_TABLES", 3)
    monkeypatch.setattr(loading, "KNOWN_FILES", 4)
    store = TableStore(storage)
    for t in range(5):
        commit_one_step(store, SCHEMA, f"events{t}", appender(storage, 1))
        commit_one_step(store, SCHEMA, f"events{t}", appender(storage, 10))  # two data files
        assert store.load(SCHEMA, f"events{t}") is not None
    reader = store._reader
    kept = list(reader._known)
    assert len(kept) == 2 and sum(len(v.files) for v in reader._known.values()) == 4  # the files bound bites first
    assert kept == [store.table_prefix(SCHEMA, f"events{t}") for t in (3, 4)]  # the most recently used
    assert len(reader._named) == 3


def test_a_write_builds_on_the_version_its_request_checked_until_another_writer_commits(
        storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The latest version a request loaded (`checked`) is its commit's base without stepping through the log or
    listing the base's folder again (`_latest` is read once, beside the claim); a commit by another writer in
    between, or the table dropped and made again by another, sends the write back to a fresh read, which is not a
    commit conflict, and nothing of either write is lost."""
    events: list[CommitEvent] = []
    mine, other = TableStore(storage, observer=events.append), TableStore(storage)
    commit_one_step(mine, SCHEMA, "events", lambda base, target: PendingVersion(TABLE, [], [], {"kind": "create"}))
    commit_one_step(mine, SCHEMA, "events", appender(storage, 1))
    prefix = mine.table_prefix(SCHEMA, "events")
    bases: list[int] = []

    def recording(first_id: int, checked: TableVersion | None) -> TableVersion | None:
        attempt = mine.begin(SCHEMA, "events", checked=checked)
        assert attempt.base is not None
        bases.append(attempt.base.version)
        return mine.commit(attempt, appender(storage, first_id)(attempt.base, attempt.target))

    checked = mine.load(SCHEMA, "events")
    assert checked is not None and checked.version == 2
    reads: list[str] = []
    with monkeypatch.context() as spied:
        for name in ("read_bytes", "exists", "list_recursive"):
            real = getattr(storage, name)
            spied.setattr(storage, name, lambda path, *a, _real=real, **k: (reads.append(path), _real(path, *a, **k))[1])
        committed = recording(10, checked)
    assert committed is not None and committed.version == 3 and bases == [2]
    assert reads.count(layout.latest_path(prefix)) == 1  # beside the claim
    assert reads.count(layout.log_path(prefix, 3)) == 1  # the claim's own check: no stepping forward before it
    assert layout.version_dir(prefix, 2) not in reads  # the base's folder is not listed again

    checked = mine.load(SCHEMA, "events")
    commit_one_step(other, SCHEMA, "events", appender(storage, 100))  # version 4, by another writer, after the request's check
    committed = recording(20, checked)
    assert committed is not None and committed.version == 5 and bases == [2, 4]
    assert events[-1].conflicts == 0 and events[-1].attempts == 1
    assert ids(mine, committed) == [1, 2, 3, 10, 11, 12, 20, 21, 22, 100, 101, 102]
    assert validate_version(storage, committed.directory) == []

    checked = mine.load(SCHEMA, "events")
    other.drop(SCHEMA, "events")  # made again by another writer, up to a lower version: no claim or record at 6
    commit_one_step(other, SCHEMA, "events", lambda base, target: PendingVersion(TABLE, [], [], {"kind": "create"}))
    commit_one_step(other, SCHEMA, "events", appender(storage, 200))
    committed = recording(30, checked)
    assert committed is not None and committed.version == 3 and bases == [2, 4, 2]
    assert events[-1].conflicts == 0
    assert ids(mine, committed) == [30, 31, 32, 200, 201, 202]
    assert validate_version(storage, committed.directory) == []
    assert not storage.exists(layout.log_path(prefix, 6)) and TableStore(storage).load(SCHEMA, "events") == committed
