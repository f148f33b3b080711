"""`tester --input`: which files a run sends, with which schema and configuration, and input mistakes answered before
any call (file, JSON path, the known values), never a traceback or a skipped operation."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from destination.tester.inputs import configuration_warnings, plan_inputs
from destination.tester.run import new_run_id
from testbed.s3server import free_port

BIN = Path(sys.executable).parent / "records-destination"
TABLE = {"columns": {"id": "INT", "v": "STRING"}, "primary_key": ["id"]}


def write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The tester against an address where nothing listens: a run that reaches the server fails with exit 2 too,
    so the tests below also check what the output says."""
    return subprocess.run([str(BIN), "tester", "--address", f"127.0.0.1:{free_port()}", "--connect-timeout", "1",
                           *args], capture_output=True, text=True, timeout=120)


def test_a_folder_gives_each_file_its_own_schema_and_its_nearest_configuration(tmp_path: Path) -> None:
    top = write(tmp_path / "in" / "configuration.json", {"root": "/top"})
    write(tmp_path / "in" / "b.json", {"create_table": {"orders": TABLE}})
    write(tmp_path / "in" / "a-1.json", {"create_table": {"orders": {"columns": {"id": "LONG"}, "primary_key": []}}})
    write(tmp_path / "in" / "sub" / "a-1.json", {})
    write(tmp_path / "in" / "sub" / "deeper" / "c.json", {})
    deeper = write(tmp_path / "in" / "sub" / "deeper" / "configuration.json", {"root": "/deeper"})
    write(tmp_path / "in" / "default_configuration.json", {"host": "clickhouse"})
    write(tmp_path / "in" / ".hidden" / "x.json", {"nonsense": 1})
    plan = plan_inputs(tmp_path / "in", "tester", "R1")
    assert [(f.name, f.schema, f.configuration) for f in plan.files] == [
        ("a-1.json", "tester_R1_a_1", top),
        ("b.json", "tester_R1_b", top),
        ("sub/a-1.json", "tester_R1_sub_a_1", top),
        ("sub/deeper/c.json", "tester_R1_sub_deeper_c", deeper)]
    assert plan.configurations == {top: {"root": "/top"}, deeper: {"root": "/deeper"}}
    assert plan.problems == [] and len(plan.skipped) == 1 and plan.skipped[0].startswith("default_configuration.json")
    assert plan.files[0].data["create_table"]["orders"]["columns"] == {"id": "LONG"}


def test_an_explicit_configuration_wins_and_a_single_file_keeps_the_schema_name(tmp_path: Path) -> None:
    write(tmp_path / "in" / "configuration.json", {"root": "/beside"})
    source = write(tmp_path / "in" / "one.json", {})
    explicit = write(tmp_path / "mine.json", {"root": "/mine"})
    (single,) = plan_inputs(source, "chosen", "R1").files
    assert (single.schema, single.configuration) == ("chosen", tmp_path / "in" / "configuration.json")
    plan = plan_inputs(tmp_path / "in", "tester", "R1", str(explicit))
    assert [f.configuration for f in plan.files] == [explicit] and plan.configurations == {explicit: {"root": "/mine"}}


def test_schema_names_that_would_collide_after_sanitising_are_numbered(tmp_path: Path) -> None:
    write(tmp_path / "a-b.json", {})
    write(tmp_path / "a_b.json", {})
    assert [f.schema for f in plan_inputs(tmp_path, "t", "R").files] == ["t_R_a_b_1", "t_R_a_b_2"]


def test_run_ids_follow_the_clock_to_the_millisecond() -> None:
    assert new_run_id(1764099000.123) == "20251125193000123"
    assert new_run_id(1764099000.124) != new_run_id(1764099000.123)


def test_mistakes_in_the_inputs_are_named_before_any_call(tmp_path: Path) -> None:
    folder = tmp_path / "inputs"
    write(folder / "types.json", {"create_table": {"orders": {"columns": {"id": "INTEGER"}, "primary_key": ["id"]}}})
    write(folder / "sub" / "ops.json", {"create_table": {"orders": TABLE},
                                        "ops": [{"upsert": {"orders": [{"id": 1, "v": "a"}]}},
                                                {"upsrt": {"orders": [{"id": 2, "v": "b"}]}},
                                                {"update": {"orders": [{"id": 1, "vv": "c"}], "other": []}}],
                                        "schema_migration": [{"add_colum": [{"table": "orders"}]},
                                                             {"add_column": [{"table": "orders", "column": "x"}]}],
                                        "describe_tabel": ["orders"]})
    write(folder / "good.json", {"create_table": {"orders": TABLE}})
    done = run_cli("--input", str(folder))
    assert done.returncode == 2, done
    lines = done.stdout.splitlines()
    assert "FAIL types.json: create_table.orders.columns.id: unknown column type 'INTEGER'; the types are BOOLEAN, " \
           "SHORT, INT, LONG, DECIMAL, FLOAT, DOUBLE, NAIVE_DATE, NAIVE_DATETIME, UTC_DATETIME, BINARY, XML, STRING, " \
           "JSON, NAIVE_TIME" in lines
    assert "FAIL sub/ops.json: ops[1].upsrt: unknown operation 'upsrt'; the operations are upsert, update, delete, " \
           "soft_delete, truncate_before, soft_truncate_before" in lines
    assert "FAIL sub/ops.json: ops[2].update.orders[0].vv: unknown column 'vv'; the known ones are id, v, " \
           "_fivetran_id, op_time" in lines
    assert "FAIL sub/ops.json: ops[2].update.other: table 'other' is not defined by this file's create_table or " \
           "alter_table; they define orders" in lines
    assert any(line.startswith("FAIL sub/ops.json: schema_migration[0].add_colum: unknown schema_migration "
                               "operation 'add_colum'; the operations are add_column, ") for line in lines), lines
    assert "FAIL sub/ops.json: schema_migration[1].add_column[0]: add_column needs the field 'data_type' (table, " \
           "column, data_type)" in lines
    assert "FAIL sub/ops.json: describe_tabel: unknown section 'describe_tabel'; the known ones are create_table, " \
           "alter_table, ops, schema_migration, describe_table" in lines
    assert lines[-1] == "summary: 7 mistake(s) in the input files; nothing was sent", lines
    assert "cannot reach" not in done.stdout and "Traceback" not in done.stderr, done


def test_a_file_that_is_not_an_input_object_is_named(tmp_path: Path) -> None:
    write(tmp_path / "list.json", [1])
    (tmp_path / "broken.json").write_text("{")
    done = run_cli("--input", str(tmp_path))
    assert done.returncode == 2, done
    assert "FAIL broken.json: cannot read the input file: Expecting property name enclosed in double quotes" \
        in done.stdout
    assert "FAIL list.json: (the file): expected a JSON object with create_table, alter_table, ops, " \
           "schema_migration, describe_table, found list [1]" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_configuration_value_that_is_not_a_string_is_named(tmp_path: Path) -> None:
    source = write(tmp_path / "input.json", {})
    conf = write(tmp_path / "configuration.json", {"changes_include_header": True})
    done = run_cli("--input", str(source))
    assert done.returncode == 2, done
    assert (f"FAIL the configuration file {str(conf)!r}: 'changes_include_header' is true; every value is a JSON "
            "string (write \"true\")") in done.stdout
    assert "Traceback" not in done.stderr


def test_a_folder_without_inputs_says_so(tmp_path: Path) -> None:
    write(tmp_path / "configuration.json", {})
    done = run_cli("--input", str(tmp_path))
    assert done.returncode == 2 and f"FAIL no input files (*.json) in {str(tmp_path)!r}" in done.stdout, done


def test_configuration_keys_the_form_does_not_know_are_warned_about_with_the_closest_field() -> None:
    fields = ["root", "changes", "changes_image"]
    assert configuration_warnings("c.json", {"root": "/x", "chnages": "parquet", "zzz": "1"}, fields) == [
        "c.json: configuration field 'chnages' is not a field of the destination's form and is ignored (did you "
        "mean 'changes'?); the form's fields are root, changes, changes_image",
        "c.json: configuration field 'zzz' is not a field of the destination's form and is ignored; the form's "
        "fields are root, changes, changes_image"]
