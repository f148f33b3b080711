"""History mode through the server: the upstream document's worked examples and the cases around them, as
tester inputs driven by the harness (one WriteHistoryBatch per input file), on both backends.

After every request the stored versions keep the invariants (tests.reference_model.history_violations); after
every file they equal the reference model's, and the examples also assert their expected rows literally.
Instants carry microseconds (`.123456`) so an end of "start minus 1 ms" that rounded would show.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from destination.protocol import common, sdk
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from tests.conftest import spec_of
from tests.reference_model import TMAX, Model, history_violations
from tests.rpc_helpers import rows_of
from tests.test_conformance import ModelClockHarness, check_against_model

BASE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
MS = dt.timedelta(milliseconds=1)
USERS = {"columns": {"id": "INT", "col1": "STRING", "col2": "INT"}, "primary_key": ["id"], "history_mode": True}


def T(n: int) -> str:
    """Instant number n, as an input's op_time."""
    return (BASE + dt.timedelta(minutes=n, microseconds=123456)).isoformat().replace("+00:00", "Z")


def t(n: int) -> dt.datetime:
    """Instant number n, as stored (naive UTC)."""
    return (BASE + dt.timedelta(minutes=n, microseconds=123456)).replace(tzinfo=None)


class CheckingHarness(ModelClockHarness):
    """Checks the invariants after each WriteHistoryBatch and keeps the last request to send it again; stamps rows
    on the model's clock."""

    def __init__(self, *args: Any, tables: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checked = tables
        self.last_history_request: Any = None

    def _answer(self, rpc: str, target: str, call: Any, request: Any) -> Any:
        response = super()._answer(rpc, target, call, request)
        if rpc == "WriteHistoryBatch":
            self.last_history_request = request
            for name in self.checked:
                rows = rows_of(self.configuration, self.schema, name)
                assert history_violations(rows, ["id"]) == [], f"after {target}"
        return response


class Scenario:
    """Input files run one after another against one schema, with the model following along."""

    def __init__(self, address: str, configuration: dict[str, str], tmp_path: Path) -> None:
        self.configuration = configuration
        self.tmp_path = tmp_path
        self.harness = CheckingHarness(address, "tester", configuration, plain_text=False, batch_file_type="csv",
                                       workdir=tmp_path, tables=["users"])
        self.model = Model()
        self.files = 0

    def run(self, ops: list[dict[str, Any]]) -> None:
        data: dict[str, Any] = {"ops": ops}
        if not self.files:
            data["create_table"] = {"users": USERS}
        self.files += 1
        path = self.tmp_path / f"step{self.files}.json"
        path.write_text(json.dumps(data))
        self.harness.run_file(path)
        assert self.harness.failures == 0
        self.model.run(data)
        check_against_model(self.configuration, self.model)

    def versions(self) -> list[tuple[Any, ...]]:
        rows = rows_of(self.configuration, "tester", "users")
        return sorted((r["id"], r["col1"], r["col2"], naive(r["_fivetran_start"]), naive(r["_fivetran_end"]),
                       r["_fivetran_active"]) for r in rows)


def naive(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC).replace(tzinfo=None)


def upsert(*rows: tuple[int, str, int, int]) -> dict[str, Any]:
    return {"upsert": {"users": [{"id": i, "col1": c1, "col2": c2, "op_time": T(n)} for i, c1, c2, n in rows]}}


@pytest.fixture
def scenario(grpc_server: str, configuration: dict[str, str], tmp_path: Path) -> Scenario:
    return Scenario(grpc_server, configuration, tmp_path)


def test_earliest_start_older_than_existing_versions(scenario: Scenario) -> None:
    """The document's earliest-start example: versions from the earliest start on go, the open ones close at
    earliest - 1 ms (also id 1's version that ended at T200 - 1 ms, as the document's table shows)."""
    scenario.run([upsert((1, "abc", 1, 100), (2, "mno", 3, 102), (3, "xyz", 4, 103), (4, "lmn", 5, 104))])
    scenario.run([upsert((1, "pqr", 2, 200))])
    scenario.run([upsert((1, "efg", 6, 150), (2, "hij", 7, 105), (3, "pqr", 8, 105))])
    assert scenario.versions() == [
        (1, "abc", 1, t(100), t(150) - MS, False),
        (1, "efg", 6, t(150), TMAX, True),
        (2, "hij", 7, t(105), TMAX, True),
        (2, "mno", 3, t(102), t(105) - MS, False),
        (3, "pqr", 8, t(105), TMAX, True),
        (3, "xyz", 4, t(103), t(105) - MS, False),
        (4, "lmn", 5, t(104), TMAX, True),
    ]


def test_several_versions_of_a_key_in_one_update_request(scenario: Scenario) -> None:
    """The document's update example: unmodified columns come from the version just before, stored or new."""
    scenario.run([upsert((1, "abc", 1, 1))])
    scenario.run([upsert((1, "pqr", 2, 2), (2, "mno", 3, 2))])
    scenario.run([{"update": {"users": [{"id": 1, "col1": "xyz", "op_time": T(3)},
                                        {"id": 2, "col2": 1000, "op_time": T(4)},
                                        {"id": 1, "col1": "def", "op_time": T(5)}]}}])
    assert scenario.versions() == [
        (1, "abc", 1, t(1), t(2) - MS, False),
        (1, "def", 2, t(5), TMAX, True),
        (1, "pqr", 2, t(2), t(3) - MS, False),
        (1, "xyz", 2, t(3), t(5) - MS, False),
        (2, "mno", 3, t(2), t(4) - MS, False),
        (2, "mno", 1000, t(4), TMAX, True),
    ]


def test_delete_only_then_reinsert_then_update_of_missing_key(scenario: Scenario) -> None:
    scenario.run([upsert((1, "a", 1, 10), (2, "b", 2, 10))])
    scenario.run([{"delete": {"users": [{"id": 2, "op_time": T(20)}, {"id": 9, "op_time": T(20)}]}}])
    assert scenario.versions() == [(1, "a", 1, t(10), TMAX, True), (2, "b", 2, t(10), t(20), False)]
    scenario.run([upsert((2, "b2", 22, 30))])
    scenario.run([{"update": {"users": [{"id": 7, "col1": "nobody", "op_time": T(40)}]}}])
    assert scenario.versions() == [
        (1, "a", 1, t(10), TMAX, True),
        (2, "b", 2, t(10), t(20), False),  # the delete time stays its end
        (2, "b2", 22, t(30), TMAX, True),
    ]


def test_upsert_and_delete_of_one_key_in_one_request(scenario: Scenario) -> None:
    scenario.run([upsert((1, "a", 1, 10)), {"delete": {"users": [{"id": 1, "op_time": T(15)}]}}])
    assert scenario.versions() == [(1, "a", 1, t(10), t(15), False)]


def test_out_of_order_versions_across_requests(scenario: Scenario) -> None:
    scenario.run([upsert((5, "late", 50, 20))])
    scenario.run([upsert((5, "early", 10, 10))])  # an earlier start: the later version goes
    assert scenario.versions() == [(5, "early", 10, t(10), TMAX, True)]
    scenario.run([{"update": {"users": [{"id": 5, "col2": 15, "op_time": T(15)}]}}])
    scenario.run([{"update": {"users": [{"id": 5, "col1": "mid", "op_time": T(12)}]}}])
    assert scenario.versions() == [
        (5, "early", 10, t(10), t(12) - MS, False),
        (5, "mid", 10, t(12), TMAX, True),  # the T15 version started after T12: removed, then rebuilt from T10
    ]


def test_soft_delete_on_a_history_table_adds_the_deleted_column(scenario: Scenario, stub) -> None:  # type: ignore[no-untyped-def]
    scenario.run([upsert((1, "a", 1, 10))])
    scenario.run([{"soft_delete": {"users": [{"id": 1, "op_time": T(20)}, {"id": 3, "op_time": T(20)}]}}])
    rows = sorted(rows_of(scenario.configuration, "tester", "users"), key=lambda r: r["_fivetran_start"])
    assert [(r["col1"], r["_fivetran_deleted"], r["_fivetran_active"]) for r in rows] == [("a", None, False),
                                                                                        ("a", True, True)]
    described = stub.DescribeTable(sdk.DescribeTableRequest(configuration=scenario.configuration,
                                                              schema_name="tester", table_name="users")).table
    keys = [c.name for c in described.columns if c.primary_key]
    assert keys == ["id", "_fivetran_start"]
    assert "_fivetran_deleted" in [c.name for c in described.columns]


def test_a_retried_request_applies_once(scenario: Scenario, stub) -> None:  # type: ignore[no-untyped-def]
    scenario.run([upsert((1, "a", 1, 10))])
    scenario.run([{"update": {"users": [{"id": 1, "col1": "b", "op_time": T(20)}]}}])
    store = TableStore(open_storage(spec_of(scenario.configuration)))
    version_before, rows_before = store.load("tester", "users").version, scenario.versions()  # type: ignore[union-attr]
    again = stub.WriteHistoryBatch(scenario.harness.last_history_request)
    assert again.WhichOneof("response") == "success"
    # recognised as already applied: no new version (reapplying would also commit one, even with equal rows)
    assert store.load("tester", "users").version == version_before  # type: ignore[union-attr]
    assert scenario.versions() == rows_before


def test_history_rpcs_refuse_the_wrong_mode(scenario: Scenario, stub) -> None:  # type: ignore[no-untyped-def]
    """WriteBatch on a history table (and WriteHistoryBatch on a plain one) is a Task, not a silent merge."""
    scenario.run([upsert((1, "a", 1, 10))])
    request = sdk.WriteBatchRequest(configuration=scenario.configuration, schema_name="tester",
                                    table=scenario.harness.tables["users"].proto())
    answer = stub.WriteBatch(request)
    assert answer.WhichOneof("response") == "task"
    assert "history mode" in answer.task.message and "tester.users" in answer.task.message
    plain = common.Table(name="plain")
    plain.columns.add(name="id", type=common.DataType.Value("INT"), primary_key=True)
    stub.CreateTable(sdk.CreateTableRequest(configuration=scenario.configuration, schema_name="tester", table=plain))
    answer = stub.WriteHistoryBatch(sdk.WriteHistoryBatchRequest(configuration=scenario.configuration,
                                                                 schema_name="tester", table=plain))
    assert answer.WhichOneof("response") == "task"
    assert "not in history mode" in answer.task.message


@pytest.mark.parametrize("soft", [False, True])
def test_truncate_of_a_history_table(scenario: Scenario, soft: bool) -> None:
    scenario.run([upsert((1, "a", 1, 10), (2, "b", 2, 10))])
    scenario.run([upsert((1, "a2", 11, 20)), {"soft_truncate_before" if soft else "truncate_before": ["users"]},
                  upsert((3, "c", 3, 30))])
    rows = rows_of(scenario.configuration, "tester", "users")
    if soft:  # every version before the cutoff is marked, later ones are not
        assert sorted((r["id"], r["_fivetran_deleted"]) for r in rows) == [(1, True), (1, True), (2, True), (3, None)]
    else:
        assert [r["id"] for r in rows] == [3]


def test_alter_table_on_a_history_table_keeps_every_version(scenario: Scenario, stub) -> None:  # type: ignore[no-untyped-def]
    scenario.run([upsert((1, "a", 1, 10)), upsert((1, "b", 2, 20))])
    wider = {**USERS, "columns": {**USERS["columns"], "note": "STRING"}}
    path = scenario.tmp_path / "alter.json"
    path.write_text(json.dumps({"alter_table": {"users": wider}}))
    scenario.harness.run_file(path)
    assert scenario.harness.failures == 0
    described = stub.DescribeTable(sdk.DescribeTableRequest(configuration=scenario.configuration,
                                                            schema_name="tester", table_name="users")).table
    assert [c.name for c in described.columns if c.primary_key] == ["id", "_fivetran_start"]
    assert "note" in [c.name for c in described.columns]
    assert scenario.versions() == [(1, "a", 1, t(10), t(20) - MS, False), (1, "b", 2, t(20), TMAX, True)]
