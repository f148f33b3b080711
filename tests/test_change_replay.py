"""Change files, end to end: every tester input (plain, history-mode, schema migrations) driven through the server
with change files on must leave the rows the reference model expects; then an independent consumer
(tests/change_consumer.py) replays every table's change directories from its first version and must arrive at
exactly the table's final rows. Each input runs in each
change format (Arcion CSV with full images and a header, Arcion JSON with the seed's minimal images, Parquet),
and every change directory must be a valid records directory."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from destination.commands.validator import validate_directory
from destination.model.table_model import DESTINATION_META, SYNCED
from destination.on_disk import layout
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from tests.change_consumer import replay
from tests.conftest import s3_configuration, spec_of
from tests.reference_model import Model
from tests.rpc_helpers import rows_of
from tests.test_conformance import ALL_INPUTS, ModelClockHarness, check_against_model, model_of
from tests.tester_inputs import input_files

VARIANTS: dict[str, dict[str, str]] = {
    "arcion-csv": {"changes": "arcion-csv", "changes_include_header": "true", "changes_emit_noop_updates": "true"},
    "arcion-json": {"changes": "arcion-json", "changes_image": "minimal", "changes_emit_noop_updates": "true"},
    "parquet": {"changes": "parquet"},  # no-op updates left out (the default)
}
INPUTS = ALL_INPUTS


def check_replay(configuration: dict[str, str], schema: str = "tester") -> dict[str, Any]:
    """Replay every table of the schema; returns what the replicas saw, for further assertions."""
    store = TableStore(open_storage(spec_of(configuration)))
    seen: dict[str, Any] = {}
    for name in store.list_tables(schema):
        check_change_directories(store, schema, name)
        replica = replay(store.storage, schema, name)
        stored = [{k: v for k, v in row.items() if k != DESTINATION_META}
                  for row in rows_of(configuration, schema, name)]
        expected = {replica.key_of(row): row for row in stored}
        got = replica.rows
        if replica.noops_left_out:  # a left-out no-op update changed only _fivetran_synced
            expected = {k: {c: v for c, v in r.items() if c != SYNCED} for k, r in expected.items()}
            got = {k: {c: v for c, v in r.items() if c != SYNCED} for k, r in got.items()}
        assert set(got) == set(expected), f"{name}: keys differ"
        for key, row in expected.items():
            assert got[key] == row, f"{name} {key}: replayed {got[key]} but the table holds {row}"
        seen[name] = replica
    return seen


def check_change_directories(store: TableStore, schema: str, name: str) -> None:
    """Every committed version has a valid change directory; no staging leftovers."""
    prefix = layout.table_prefix(schema, name)
    latest = store.latest_version_number(prefix)
    for version in range(1, latest + 1):
        directory = layout.changes_dir(prefix, version)
        about = json.loads(store.storage.read_bytes(f"{directory}/_changes.json"))
        fmt = "parquet" if about["format"] == "parquet" else "delimited"
        assert validate_directory(store.storage, directory, fmt) == [], f"{name} v{version}"
        record = json.loads(store.storage.read_bytes(layout.log_path(prefix, version)))
        assert record["changes"]["directory"] == f"changes/{layout.version_dir_name(version)}"
    assert sorted(store.storage.list_children(layout.changes_root(prefix))) == \
        [layout.version_dir_name(v) for v in range(1, latest + 1)]


def run_input(address: str, configuration: dict[str, str], path: Path, tmp_path: Path) -> None:
    """Run the input file; its tables must then hold what the reference model expects."""
    harness = ModelClockHarness(address, "tester", configuration, plain_text=False, batch_file_type="csv",
                                workdir=tmp_path)
    harness.run_file(path)
    assert harness.failures == 0
    check_against_model(configuration, model_of(path))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("path", INPUTS, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_replaying_the_change_files_reproduces_every_table(grpc_server, tmp_path: Path, path: Path,
                                                           variant: str) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), **VARIANTS[variant]}
    run_input(grpc_server, configuration, path, tmp_path)
    check_replay(configuration)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("path", input_files("clickhouse/input_history_mode.json", "clickhouse/input_all_data_types.json",
                                               "clickhouse/schema_migrations_input_dml.json"), ids=lambda p: p.stem)
def test_replay_on_s3(grpc_server, s3_server, tmp_path: Path, path: Path, variant: str) -> None:  # type: ignore[no-untyped-def]
    import uuid

    configuration = {**s3_configuration(s3_server, f"cdc-{uuid.uuid4().hex[:10]}"), **VARIANTS[variant]}
    run_input(grpc_server, configuration, path, tmp_path)
    check_replay(configuration)


# ---- requests one after another: changes across versions --------------------------------------------------

USERS = {"columns": {"id": "INT", "name": "STRING", "score": "DOUBLE", "day": "NAIVE_DATE"}, "primary_key": ["id"]}
ACCOUNTS = {"columns": {"id": "INT", "name": "STRING"}, "primary_key": ["id"]}
HISTORY = {"columns": {"id": "INT", "col1": "STRING", "col2": "INT"}, "primary_key": ["id"], "history_mode": True}


def user(i: int, name: str | None, score: float = 1.5) -> dict[str, Any]:
    return {"id": i, "name": name, "score": score, "day": f"2024-01-{i:02d}"}


PLAIN_STEPS: list[dict[str, Any]] = [
    {"create_table": {"users": USERS, "accounts": ACCOUNTS},
     "ops": [{"upsert": {"users": [user(i, f"u{i}") for i in range(1, 6)],
                         "accounts": [{"id": i, "name": f"a{i}"} for i in range(1, 4)]}}]},
    # a no-op upsert (2), a new key (6), an update (1), a hard delete (3), a soft delete (4)
    {"ops": [{"upsert": {"users": [user(2, "u2"), user(6, "u6")]}},
             {"update": {"users": [{"id": 1, "name": "one"}]}},
             {"delete": {"users": [{"id": 3}]}},
             {"soft_delete": {"users": [{"id": 4}]}}]},
    # re-insert a deleted key, set a value NULL, delete and update keys that do not exist
    {"ops": [{"upsert": {"users": [user(3, "back")], "accounts": [{"id": 9, "name": "a9"}]}},
             {"update": {"users": [{"id": 5, "name": None}, {"id": 42, "name": "nobody"}]}},
             {"delete": {"users": [{"id": 99}]}}]},
    {"alter_table": {"users": {**USERS, "columns": {**USERS["columns"], "note": "STRING"}}},
     "ops": [{"upsert": {"users": [{**user(8, "u8"), "note": "new column"}]}}]},
    {"ops": [{"truncate_before": ["users"]}, {"soft_truncate_before": ["accounts"]},
             {"upsert": {"users": [user(7, "after")], "accounts": [{"id": 2, "name": "again"}]}}]},
]


def T(n: int) -> str:
    return f"2024-01-01T00:{n:02d}:00.123456Z"


def version(i: int, col1: str, col2: int, n: int) -> dict[str, Any]:
    return {"id": i, "col1": col1, "col2": col2, "op_time": T(n)}


HISTORY_STEPS: list[dict[str, Any]] = [
    {"create_table": {"users": HISTORY}, "ops": [{"upsert": {"users": [version(1, "a", 1, 10), version(2, "b", 2, 10)]}}]},
    {"ops": [{"update": {"users": [{"id": 1, "col1": "a2", "op_time": T(20)}]}}]},
    {"ops": [{"delete": {"users": [{"id": 2, "op_time": T(30)}]}}]},
    # a re-insert, and an earlier start for key 1: its T20 version goes and the T10 one closes at T15 - 1 ms
    {"ops": [{"upsert": {"users": [version(2, "b2", 22, 40), version(1, "early", 5, 15)]}}]},
    {"ops": [{"soft_delete": {"users": [{"id": 1, "op_time": T(50)}]}}]},
    {"ops": [{"truncate_before": ["users"]}, {"upsert": {"users": [version(3, "c", 3, 55)]}}]},
]


def run_steps(address: str, configuration: dict[str, str], tmp_path: Path, steps: list[dict[str, Any]]) -> list[Any]:
    """Each step is one input file (its requests commit new versions); the replay must hold after every step."""
    harness = ModelClockHarness(address, "tester", configuration, plain_text=False, batch_file_type="csv",
                                workdir=tmp_path)
    model = Model()
    seen = []
    for i, step in enumerate(steps):
        path = tmp_path / f"step{i}.json"
        path.write_text(json.dumps(step))
        harness.run_file(path)
        assert harness.failures == 0
        model.run(step)
        check_against_model(configuration, model)
        seen.append(check_replay(configuration))
    return seen


def change_counts(configuration: dict[str, str], table: str) -> list[dict[str, Any]]:
    store = TableStore(open_storage(spec_of(configuration)))
    prefix = layout.table_prefix("tester", table)
    return [json.loads(store.storage.read_bytes(f"{layout.changes_dir(prefix, v)}/_changes.json"))
            for v in range(1, store.latest_version_number(prefix) + 1)]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_plain_changes_across_requests(grpc_server, tmp_path: Path, variant: str) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), **VARIANTS[variant]}
    run_steps(grpc_server, configuration, tmp_path, PLAIN_STEPS)
    about = change_counts(configuration, "users")
    kinds = [(a["kind"], a["counts"]["insert"], a["counts"]["update"], a["counts"]["delete"]) for a in about]
    noops = VARIANTS[variant].get("changes_emit_noop_updates") != "true"
    assert kinds == [
        ("snapshot", 0, 0, 0),  # CreateTable
        ("rows", 5, 0, 0),
        ("rows", 1, 2 if noops else 3, 1),  # 6 in; 1 and 4 (soft delete) updated, 2 only re-synced; 3 out
        ("rows", 1, 1, 0),  # 3 back; 5's name NULL; updates and deletes of missing keys are not changes
        ("snapshot", 0, 0, 0),  # AlterTable adds `note`: the table's rows as of the new definition
        ("rows", 1, 0, 0),
        ("rows", 0, 0, 7),  # the hard truncate removes every row (the soft-deleted 4 too)
        ("rows", 1, 0, 0),
    ]
    assert about[2]["noop_updates_left_out"] == (1 if noops else 0)
    totals = about[-1]["operation_totals_after"]
    assert totals == {"insert": 9, "update": 3 if noops else 4, "delete": 8}
    accounts = change_counts(configuration, "accounts")
    soft = next(a for a in accounts if a["counts"]["update"] == 4)  # the soft truncate marks 1, 2, 3 and 9
    assert soft["kind"] == "rows" and soft["counts"]["delete"] == 0


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_history_changes_across_requests(grpc_server, tmp_path: Path, variant: str) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), **VARIANTS[variant]}
    run_steps(grpc_server, configuration, tmp_path, HISTORY_STEPS)
    about = change_counts(configuration, "users")
    kinds = [(a["kind"], a["counts"]["insert"], a["counts"]["update"], a["counts"]["delete"]) for a in about]
    assert kinds == [
        ("snapshot", 0, 0, 0),
        ("rows", 2, 0, 0),
        ("rows", 1, 1, 0),  # key 1: a new version, and the T10 version closed
        ("rows", 0, 1, 0),  # key 2: its active version closed at the delete time
        ("rows", 2, 1, 1),  # 2's new version; 1's T15 version, its T10 version re-closed, its T20 version gone
        ("snapshot", 0, 0, 0),  # the first soft delete adds `_fivetran_deleted` to the table
        ("rows", 1, 1, 0),  # key 1: a deleted version opens, the active one closes
        ("rows", 0, 0, 5),  # the truncate removes every version
        ("rows", 1, 0, 0),
    ]
