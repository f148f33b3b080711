"""User errors on the command line get a message and an exit code, never a Python traceback."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from destination.cli import build_parser, main
from testbed.s3server import free_port
from tests.rpc_helpers import table
from tests.test_write_path import create, write

BIN = Path(sys.executable).parent / "records-destination"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=120)


def test_tester_with_a_missing_input_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.json"
    done = run("tester", "--input", str(missing), "--address", f"127.0.0.1:{free_port()}")
    assert done.returncode == 2 and f"FAIL the input {str(missing)!r} does not exist" in done.stdout, done
    assert "Traceback" not in done.stderr


def test_tester_gives_up_on_an_unreachable_server_after_its_connect_timeout(tmp_path: Path) -> None:
    assert build_parser().parse_args(["tester", "--input", "x.json"]).connect_timeout == 10.0
    source = tmp_path / "input.json"
    source.write_text("{}")
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    done = run("tester", "--input", str(source), "--address", address, "--connect-timeout", "1")
    assert done.returncode == 2, done
    assert (f"FAIL cannot reach the destination at {address} within 1 s (is the server running? --connect-timeout "
            "waits longer)") in done.stdout
    assert "Traceback" not in done.stderr


def test_serve_on_a_busy_port_says_so(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET6) as busy:
        busy.bind(("::", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run("serve", "--port", str(port), "--root", str(tmp_path / "root"))
    assert done.returncode != 0
    # one clear line: gRPC's own "E1128 ... Failed to add port" lines came first before the port was probed
    assert done.stderr == (f"cannot listen on port {port}: it is in use by another process (or not allowed); stop "
                           "that process or choose another --port\n"), done.stderr


def test_tester_refuses_an_address_outside_the_port_range_at_once(tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_text("{}")
    started = time.monotonic()
    done = run("tester", "--input", str(source), "--address", "localhost:99999")  # waited its 10 s connect timeout
    assert done.returncode == 2 and time.monotonic() - started < 8, done
    assert ("records-destination tester: error: argument --address: 'localhost:99999': the port 99999 is outside the "
            "port range 1-65535") in done.stderr, done.stderr


def test_serve_names_every_bad_environment_value_in_one_message(tmp_path: Path) -> None:
    bad = {"RECORDS_DESTINATION_GRACE_SECONDS": "soon", "RECORDS_DESTINATION_HEALTH_INTERVAL": "5s",
           "RECORDS_DESTINATION_S3_RETRY_ATTEMPTS": "2.5"}
    done = subprocess.run([str(BIN), "serve", "--root", str(tmp_path / "root"), "--port", str(free_port())],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **bad})
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("records-destination serve: "), done.stderr
    for name, value in bad.items():
        assert f"the environment variable {name} is {value!r}, not a" in lines[0], lines[0]
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("option", ["--port", "--metrics-port", "--spark-ui-port"])
@pytest.mark.parametrize("value", ["70000", "0", "-1", "http"])
def test_serve_refuses_a_port_outside_1_to_65535(option: str, value: str, tmp_path: Path) -> None:
    done = run("serve", option, value, "--root", str(tmp_path / "root"))
    assert done.returncode == 2, done
    expected = "is outside the port range 1-65535" if value != "http" else "'http' is not a port number (1-65535)"
    assert f"records-destination serve: error: argument {option}: " in done.stderr and expected in done.stderr, done
    assert "Traceback" not in done.stderr and not (tmp_path / "root").exists()


def test_serve_and_tables_refuse_a_root_that_is_a_file(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("not a folder")
    served = run("serve", "--root", str(readme), "--port", str(free_port()))
    assert served.returncode == 1, served
    assert (f"records-destination serve: the root {str(readme)!r} is a file, not a directory: name a directory "
            "(created when missing) or s3://bucket/prefix") in served.stderr
    listed = run("tables", "--root", str(readme))
    assert listed.returncode == 1
    assert f"records-destination tables: the root {str(readme)!r} is a file, not a directory" in listed.stderr, listed
    assert "Traceback" not in served.stderr + listed.stderr and readme.read_text() == "not a folder"


def test_a_scheme_less_s3_endpoint_is_refused_not_guessed() -> None:
    done = run("tables", "--root", "s3://bucket/x", "--s3-endpoint", "localhost:9000")
    assert done.returncode == 1, done
    assert ("records-destination tables: s3_endpoint 'localhost:9000' names no scheme: write http://localhost:9000 "
            "or https://localhost:9000") in done.stderr
    assert "Traceback" not in done.stderr


def test_tables_of_a_missing_root_exits_non_zero_without_creating_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-root"
    done = run("tables", "--root", str(missing))
    assert done.returncode == 1
    assert f"records-destination tables: the root directory {str(missing)!r} does not exist" in done.stderr, done
    assert "Traceback" not in done.stderr and not missing.exists()


def test_a_closed_pipe_ends_quietly_with_exit_0(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    proc = subprocess.Popen([str(BIN), "tables", "--root", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head` does once it has its lines: every write now fails with EPIPE
    errors = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, errors  # as `ls | head -1` and `git log | head -1` end
    assert errors == ""


def test_serve_refuses_a_root_that_cannot_be_created(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where a folder would be")
    for root in ("/proc/nope/data", str(blocked / "data")):
        done = run("serve", "--root", root, "--port", str(free_port()))  # before the fix: never exited
        assert done.returncode == 1, done
        assert f"records-destination serve: the root directory {root!r} cannot be created: " in done.stderr, done
        assert "name a directory (created when missing) or s3://bucket/prefix" in done.stderr
        assert "Traceback" not in done.stderr


def test_changes_with_a_limit_prints_the_total(stub, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), "changes": "parquet"}
    t = table("t", [("id", "INT", True), ("v", "STRING")])
    create(stub, configuration, "c", t)
    write(stub, configuration, "c", t, tmp_path, replace=[{"id": str(i), "v": "x"} for i in range(3)])
    capsys.readouterr()
    assert main(["changes", "c.t", "--from-version", "1", "--limit", "1", "--root", configuration["root"]]) == 0
    out = capsys.readouterr().out
    assert "c.t: changes from version 1 to 2: 3 rows" in out, out


def test_tester_with_a_missing_or_broken_configuration_says_so(tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_text("{}")
    missing = tmp_path / "no-configuration.json"
    done = run("tester", "--input", str(source), "--configuration", str(missing))
    assert done.returncode == 2 and f"FAIL the configuration file {str(missing)!r} does not exist" in done.stdout
    broken = tmp_path / "configuration.json"  # found beside the input
    broken.write_text("{root: x}")
    done = run("tester", "--input", str(source))
    assert done.returncode == 2, done
    assert f"FAIL the configuration file {str(broken)!r} is not a JSON object: Expecting property name" in done.stdout
    assert "Traceback" not in done.stderr
