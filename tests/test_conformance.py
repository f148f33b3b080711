"""Every plain-table tester input, driven through the server by the harness, on both backends and in CSV and
Parquet batch-file modes, ends in the state the protocol implies (row by row, against the reference model), and
every committed version passes the records-directory validator."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from destination.tester.harness import Harness
from tests.reference_model import Model, canon
from tests.rpc_helpers import rows_of

INPUTS = Path(__file__).resolve().parent.parent.parent / "shared" / "tester-inputs"
PLAIN_FILES = sorted(p for p in (INPUTS / "clickhouse").glob("input_*.json") if p.name != "input_history_mode.json")
SDK_FILES = [INPUTS / "fivetran_partner_sdk" / "input.json",
             *sorted((INPUTS / "fivetran_partner_sdk" / "operations_on_nonexistent_records").glob("*.json"))]


def run_harness(address: str, configuration: dict[str, str], path: Path, tmp_path: Path, batch_type: str) -> Harness:
    harness = Harness(address, "tester", configuration, plain_text=False, batch_file_type=batch_type, workdir=tmp_path)
    harness.run_file(path)
    return harness


def check_against_model(configuration: dict[str, str], data: dict[str, Any]) -> None:
    model = Model()
    model.run(data)
    for name, table in model.tables.items():
        if table.history:
            continue
        stored = rows_of(configuration, "tester", name)
        got = {table.key(r): r for r in stored}
        assert len(got) == len(stored), f"{name}: duplicate keys stored"
        assert set(got) == set(table.rows), f"{name}: keys differ: stored {sorted(got)} expected {sorted(table.rows)}"
        for key, expected in table.rows.items():
            for column, ftype in [*table.types.items(), ("_fivetran_deleted", "BOOLEAN")]:
                assert canon(got[key].get(column), ftype) == canon(expected.get(column), ftype), \
                    f"{name} {key} column {column}: stored {got[key].get(column)!r}, expected {expected.get(column)!r}"


@pytest.mark.parametrize("batch_type", ["csv", "parquet"])
@pytest.mark.parametrize("path", PLAIN_FILES, ids=lambda p: p.stem)
def test_plain_inputs(grpc_server, configuration, tmp_path, path: Path, batch_type: str) -> None:  # type: ignore[no-untyped-def]
    harness = run_harness(grpc_server, configuration, path, tmp_path, batch_type)
    assert harness.failures == 0
    check_against_model(configuration, json.loads(path.read_text()))


@pytest.mark.parametrize("path", SDK_FILES, ids=lambda p: p.stem)
def test_sdk_inputs_plain_tables(grpc_server, configuration, tmp_path, path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The SDK's files mix plain and history tables: the plain ones must end right (history mode is its own issue)."""
    run_harness(grpc_server, configuration, path, tmp_path, "csv")
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("FAIL") and "WriteHistoryBatch" not in line]
    assert failed == []
    check_against_model(configuration, json.loads(path.read_text()))
