"""`tester --input FOLDER` through a real server: every file (subfolders included) starts from an empty schema of its
own, so files sharing a table name never meet, and neither do two runs against one root; configuration.json
configures the inputs beside it; a configuration key the server's form does not know is a warning naming it."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from destination.rpc.configuration import known_fields
from tests.rpc_helpers import rows_of

BIN = Path(sys.executable).parent / "records-destination"


def write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return path


def run_tester(address: str, source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), "tester", "--input", str(source), "--address", address], capture_output=True,
                          text=True, timeout=300)


def schemas(stdout: str) -> dict[str, str]:
    """Each file's schema, from the run's closing lines (`PASS name (schema S): N calls`)."""
    return dict(re.findall(r"^PASS (\S+) \(schema (\S+)\): \d+ calls?$", stdout, re.MULTILINE))


def test_each_file_of_a_folder_and_of_each_run_starts_from_an_empty_schema(grpc_server: str, tmp_path: Path) -> None:
    folder = tmp_path / "inputs"
    (tmp_path / "root").mkdir()  # the storage Test creates no root
    configuration = {"root": str(tmp_path / "root")}
    write(folder / "configuration.json", configuration)
    write(folder / "default_configuration.json", {"host": "clickhouse"})  # another destination's: not an input
    write(folder / "a.json", {"create_table": {"orders": {"columns": {"id": "INT", "v": "STRING"}, "primary_key": ["id"]}},
                              "ops": [{"upsert": {"orders": [{"id": 1, "v": "x"}, {"id": 2, "v": "y"}]}}],
                              "describe_table": ["orders"]})
    # the same table name with another definition, in a subfolder
    write(folder / "sub" / "b.json", {"create_table": {"orders": {"columns": {"code": "STRING", "amount": "DOUBLE"},
                                                                  "primary_key": ["code"]}},
                                      "ops": [{"upsert": {"orders": [{"code": "k", "amount": 1.5}]}}]})
    runs = [run_tester(grpc_server, folder) for _ in range(2)]
    seen = []
    for done in runs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "skip default_configuration.json: a configuration file, not an input" in done.stdout
        lines = done.stdout.splitlines()
        assert lines[-1].startswith("summary: 2 files, 2 passed, 0 failed; ") and lines[-1].endswith(" 0 failed")
        named = schemas(done.stdout)
        assert sorted(named) == ["a.json", "sub/b.json"], done.stdout
        assert re.fullmatch(r"tester_\d{17}_a", named["a.json"]) and named["sub/b.json"] == \
            named["a.json"].removesuffix("_a") + "_sub_b"
        assert sorted((r["id"], r["v"]) for r in rows_of(configuration, named["a.json"], "orders")) == \
            [(1, "x"), (2, "y")]
        assert [(r["code"], r["amount"]) for r in rows_of(configuration, named["sub/b.json"], "orders")] == [("k", 1.5)]
        seen.append(named["a.json"])
    assert seen[0] != seen[1]


def test_a_configuration_field_the_form_does_not_know_is_a_warning_naming_the_file(grpc_server: str,
                                                                                   tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()  # the storage Test creates no root
    conf = write(tmp_path / "configuration.json", {"root": str(tmp_path / "root"), "chnages": "parquet"})
    source = write(tmp_path / "input.json", {})
    done = run_tester(grpc_server, source)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"WARN {conf}: configuration field 'chnages' is not a field of the destination's form and is ignored "
            f"(did you mean 'changes'?); the form's fields are {', '.join(known_fields())}") in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1].endswith("; 1 warning(s)"), done.stdout
