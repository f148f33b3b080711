"""Migrate's history-mode and sync-mode operations through the server: each with data and on an empty table,
retried, with an invalid default or timestamp, and followed by a write in the table's new mode."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from destination.protocol import common, sdk
from destination.tester.harness import Harness
from tests.reference_model import history_violations
from tests.rpc_helpers import describe, rows_of

UTC = dt.UTC
TMAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
TMIN = dt.datetime(1, 1, 1, tzinfo=UTC)
MS = dt.timedelta(milliseconds=1)
TS = "2005-05-28T20:57:00Z"
AT_TS = dt.datetime(2005, 5, 28, 20, 57, tzinfo=UTC)
HISTORY = {"columns": {"id": "INT", "v": "STRING"}, "primary_key": ["id"], "history_mode": True}
PLAIN = {"columns": {"id": "INT", "v": "STRING"}, "primary_key": ["id"]}


class Setup:
    def __init__(self, address: str, configuration: dict[str, str], tmp_path: Path, stub: Any) -> None:
        self.configuration, self.tmp_path, self.stub = configuration, tmp_path, stub
        self.harness = Harness(address, "tester", configuration, plain_text=False, batch_file_type="csv",
                               workdir=tmp_path)
        self.files = 0

    def run(self, data: dict[str, Any]) -> None:
        self.files += 1
        path = self.tmp_path / f"in{self.files}.json"
        path.write_text(json.dumps(data))
        self.harness.run_file(path)
        assert self.harness.failures == 0

    def migrate(self, table: str, **fill: Any) -> Any:
        details = sdk.MigrationDetails(schema="tester", table=table)
        for path, value in fill.items():
            target = details
            *parents, last = path.split("__")
            for p in parents:
                target = getattr(target, p)
            setattr(target, last, value)
        return self.stub.Migrate(sdk.MigrateRequest(configuration=self.configuration, details=details))

    def rows(self, table: str) -> list[dict[str, Any]]:
        return rows_of(self.configuration, "tester", table)

    def versions(self, table: str, column: str = "v") -> list[tuple[Any, ...]]:
        rows = self.rows(table)
        assert history_violations(rows, ["id"]) == []
        return sorted(((r["id"], r.get(column), r["_fivetran_start"], r["_fivetran_end"], r["_fivetran_active"])
                       for r in rows), key=lambda v: (v[0], v[2]))


@pytest.fixture
def setup(grpc_server: str, configuration: dict[str, str], tmp_path: Path, stub: Any) -> Setup:
    return Setup(grpc_server, configuration, tmp_path, stub)


def add_in_history_mode(setup: Setup, table: str, column: str, data_type: str, default: str) -> Any:
    return setup.migrate(table, add__add_column_in_history_mode__column=column,
                         add__add_column_in_history_mode__column_type=common.DataType.Value(data_type),
                         add__add_column_in_history_mode__default_value=default,
                         add__add_column_in_history_mode__operation_timestamp=TS)


def at(day: int) -> dt.datetime:
    return dt.datetime(2005, 5, day, 12, tzinfo=UTC)


def history_table(setup: Setup, with_data: bool) -> None:
    """id 1: two versions (day 20, day 22, active); id 2: one version, deleted on day 23."""
    ops = []
    if with_data:
        ops = [{"upsert": {"h": [{"id": 1, "v": "a", "op_time": at(20).isoformat()},
                                 {"id": 1, "v": "b", "op_time": at(22).isoformat()},
                                 {"id": 2, "v": None, "op_time": at(20).isoformat()}]}},
               {"delete": {"h": [{"id": 2, "op_time": at(23).isoformat()}]}}]
    setup.run({"create_table": {"h": HISTORY}, "ops": ops})


@pytest.mark.parametrize("with_data", [True, False], ids=["with data", "empty"])
def test_add_column_in_history_mode(setup: Setup, with_data: bool) -> None:
    history_table(setup, with_data)
    for _ in range(2):  # the second call is a retry: history is recorded once per timestamp
        assert add_in_history_mode(setup, "h", "article", "STRING", "ordered").WhichOneof("response") == "success"
    assert "article" in [c.name for c in describe(setup.stub, setup.configuration, "tester", "h").table.columns]
    expected = [
        (1, None, at(20), at(22) - MS, False),
        (1, None, at(22), AT_TS - MS, False),
        (1, "ordered", AT_TS, TMAX, True),
        (2, None, at(20), at(23), False),  # deleted before the operation: no new version
    ] if with_data else []
    assert setup.versions("h", "article") == expected


def test_add_column_in_history_mode_with_an_invalid_default(setup: Setup) -> None:
    history_table(setup, True)
    assert add_in_history_mode(setup, "h", "due", "NAIVE_DATE", "not a date").WhichOneof("response") == "success"
    new = [r for r in setup.rows("h") if r["_fivetran_start"] == AT_TS]
    assert len(new) == 1 and new[0]["due"] is None
    assert {"field": "due", "change": "NULLED", "reason": "DESTINATION_SERIALIZATION_ERROR"} in \
        json.loads(new[0]["_destination_meta"])["changes"]


def test_invalid_operation_timestamp_is_invalid_argument(setup: Setup) -> None:
    history_table(setup, True)
    with pytest.raises(grpc.RpcError) as raised:
        setup.migrate("h", drop__drop_column_in_history_mode__column="v",
                      drop__drop_column_in_history_mode__operation_timestamp="yesterday")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "operation_timestamp" in (raised.value.details() or "") and "tester.h" in (raised.value.details() or "")


@pytest.mark.parametrize("with_data", [True, False], ids=["with data", "empty"])
def test_drop_column_in_history_mode(setup: Setup, with_data: bool) -> None:
    history_table(setup, with_data)
    for _ in range(2):
        answer = setup.migrate("h", drop__drop_column_in_history_mode__column="v",
                               drop__drop_column_in_history_mode__operation_timestamp=TS)
        assert answer.WhichOneof("response") == "success"
    assert "v" in [c.name for c in describe(setup.stub, setup.configuration, "tester", "h").table.columns]
    expected = [
        (1, "a", at(20), at(22) - MS, False),
        (1, "b", at(22), AT_TS - MS, False),
        (1, None, AT_TS, TMAX, True),
        (2, None, at(20), at(23), False),
    ] if with_data else []
    assert setup.versions("h") == expected


def soft_delete_table(setup: Setup, with_data: bool, name: str = "s") -> None:
    ops = [{"upsert": {name: [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]}},
           {"soft_delete": {name: [{"id": 2}]}}] if with_data else []
    setup.run({"create_table": {name: PLAIN}, "ops": ops})


@pytest.mark.parametrize("with_data", [True, False], ids=["with data", "empty"])
def test_soft_delete_to_history_then_a_history_write(setup: Setup, with_data: bool) -> None:
    soft_delete_table(setup, with_data)
    synced = max((r["_fivetran_synced"] for r in setup.rows("s")), default=None)
    for _ in range(2):
        answer = setup.migrate("s", table_sync_mode_migration__type=sdk.TableSyncModeMigrationType.Value(
            "SOFT_DELETE_TO_HISTORY"), table_sync_mode_migration__soft_deleted_column="_fivetran_deleted")
        assert answer.WhichOneof("response") == "success"
    columns = describe(setup.stub, setup.configuration, "tester", "s").table.columns
    assert [(c.name, c.primary_key) for c in columns if c.primary_key] == [("id", True), ("_fivetran_start", True)]
    assert "_fivetran_deleted" not in [c.name for c in columns]
    expected = [(1, "a", synced, TMAX, True), (2, "b", TMIN, TMIN, False)] if with_data else []
    assert setup.versions("s") == expected
    # the table now takes history writes: a new version of id 1 closes the migrated one
    setup.harness.tables["s"].history = True
    later = dt.datetime(2100, 1, 1, tzinfo=UTC)
    setup.run({"ops": [{"upsert": {"s": [{"id": 1, "v": "c", "op_time": later.isoformat()}]}}]})
    got = setup.versions("s")
    assert got[-1 if not with_data else 1] == (1, "c", later, TMAX, True)
    if with_data:
        assert got[0] == (1, "a", synced, later - MS, False)


@pytest.mark.parametrize("with_data", [True, False], ids=["with data", "empty"])
def test_copy_table_to_history_mode(setup: Setup, with_data: bool) -> None:
    soft_delete_table(setup, with_data)
    synced = max((r["_fivetran_synced"] for r in setup.rows("s")), default=None)
    for _ in range(2):  # a retry replaces the target left by the first call
        answer = setup.migrate("s", copy__copy_table_to_history_mode__from_table="s",
                               copy__copy_table_to_history_mode__to_table="s_history",
                               copy__copy_table_to_history_mode__soft_deleted_column="_fivetran_deleted")
        assert answer.WhichOneof("response") == "success"
    expected = [(1, "a", synced, TMAX, True), (2, "b", TMIN, TMIN, False)] if with_data else []
    assert setup.versions("s_history") == expected
    assert sorted(r["id"] for r in setup.rows("s")) == ([1, 2] if with_data else [])  # the source is untouched


def test_copy_table_to_history_mode_without_a_deleted_column(setup: Setup) -> None:
    setup.run({"create_table": {"p": PLAIN}, "ops": [{"upsert": {"p": [{"id": 1, "v": "a"}]}}]})
    assert setup.migrate("p", copy__copy_table_to_history_mode__from_table="p",
                         copy__copy_table_to_history_mode__to_table="p_history",
                         copy__copy_table_to_history_mode__soft_deleted_column="is_gone").success
    assert [(r[0], r[4]) for r in setup.versions("p_history")] == [(1, True)]


@pytest.mark.parametrize("keep", [None, False], ids=["keep unset", "keep false"])
@pytest.mark.parametrize("with_data", [True, False], ids=["with data", "empty"])
def test_history_to_soft_delete_then_a_plain_write(setup: Setup, with_data: bool, keep: bool | None) -> None:
    history_table(setup, with_data)
    fill: dict[str, Any] = {"table_sync_mode_migration__type": sdk.TableSyncModeMigrationType.Value(
        "HISTORY_TO_SOFT_DELETE"), "table_sync_mode_migration__soft_deleted_column": "_fivetran_deleted"}
    if keep is not None:
        fill["table_sync_mode_migration__keep_deleted_rows"] = keep
    for _ in range(2):
        assert setup.migrate("h", **fill).WhichOneof("response") == "success"
    columns = describe(setup.stub, setup.configuration, "tester", "h").table.columns
    assert [c.name for c in columns if c.primary_key] == ["id"]
    assert not {"_fivetran_start", "_fivetran_end", "_fivetran_active"} & {c.name for c in columns}
    got = sorted(((r["id"], r["v"], r["_fivetran_deleted"]) for r in setup.rows("h")), key=lambda v: v[0])
    expected = [(1, "b", False), (2, None, True)] if with_data else []
    if keep is False:
        expected = [e for e in expected if not e[2]]
    assert got == expected
    setup.harness.tables["h"].history = False
    setup.run({"ops": [{"upsert": {"h": [{"id": 1, "v": "c"}]}}]})
    assert [r["v"] for r in setup.rows("h") if r["id"] == 1] == ["c"]


def test_wrong_mode_missing_table_and_live_mode(setup: Setup) -> None:
    soft_delete_table(setup, True)
    answer = add_in_history_mode(setup, "s", "x", "STRING", "d")
    assert answer.WhichOneof("response") == "task" and "history-mode table" in answer.task.message
    answer = setup.migrate("ghost", table_sync_mode_migration__type=sdk.TableSyncModeMigrationType.Value(
        "SOFT_DELETE_TO_HISTORY"))
    assert answer.WhichOneof("response") == "task" and "does not exist" in answer.task.message
    for live in ("SOFT_DELETE_TO_LIVE", "HISTORY_TO_LIVE", "LIVE_TO_SOFT_DELETE", "LIVE_TO_HISTORY"):
        answer = setup.migrate("s", table_sync_mode_migration__type=sdk.TableSyncModeMigrationType.Value(live))
        assert answer.WhichOneof("response") == "unsupported"


@pytest.mark.parametrize("operation", ["copy_table", "copy_table_to_history_mode"])
def test_a_failed_copy_leaves_the_existing_target_as_it_was(setup: Setup, spark, operation: str) -> None:  # type: ignore[no-untyped-def]
    """A crash before the commit record: the target keeps its earlier version, the source is untouched."""
    from destination.storage.opening import open_storage
    from destination.store.table_store import TableStore
    from destination.write import history_migrations, migrations
    from destination.write.write_path import write_path_for
    from tests.conftest import spec_of

    soft_delete_table(setup, True)
    setup.run({"create_table": {"target": PLAIN}, "ops": [{"upsert": {"target": [{"id": 9, "v": "old"}]}}]})

    def crash(step: str) -> None:
        if step == "before_commit_record":
            raise RuntimeError("simulated crash")
    parts = write_path_for(TableStore(open_storage(spec_of(setup.configuration)), fault=crash), lambda: spark)
    with pytest.raises(RuntimeError):
        if operation == "copy_table":
            migrations._copy_table(parts.tables, "tester", "s", "target")
        else:
            history_migrations.copy_table_to_history_mode(parts.store, parts.tables, "tester", "s", "target", "_fivetran_deleted")
    assert [(r["id"], r["v"]) for r in setup.rows("target")] == [(9, "old")]
    assert sorted(r["id"] for r in setup.rows("s")) == [1, 2]
