"""`tester --batch-dir`: batch files in a directory the server's user can read, their paths mapped to where the
server sees that directory (a container's mount; here a symlink to it, so the server really reads the mapped paths)."""
from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from destination.tester.harness import Harness, batch_path_map, batch_workdir
from tests.tester_inputs import INPUTS_FOLDER

BIN = Path(sys.executable).parent / "records-destination"
INPUT = INPUTS_FOLDER / "clickhouse" / "input_update_and_hard_delete.json"
FILE_LISTS = ("replace_files", "update_files", "delete_files", "earliest_start_files")


class RecordingStub:
    """The real stub; every write's file paths, and the modes of the files behind them, noted on the way."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self.paths: list[str] = []
        self.key_paths: list[str] = []
        self.modes: list[int] = []

    def __getattr__(self, rpc: str) -> Callable[..., Any]:
        call = getattr(self._stub, rpc)

        def recorded(request: Any, **kwargs: Any) -> Any:
            for name in FILE_LISTS:
                for path in getattr(request, name, []):
                    self.paths.append(path)
                    self.modes.append(stat.S_IMODE(Path(path).stat().st_mode))
            self.key_paths.extend(getattr(request, "keys", {}).keys())
            return call(request, **kwargs)
        return recorded


def test_batch_files_are_sent_under_the_servers_path(grpc_server: str, tmp_path: Path) -> None:
    host_dir = tmp_path / "batches"
    server_dir = tmp_path / "server-view"  # the server's view of host_dir
    host_dir.mkdir()
    server_dir.symlink_to(host_dir)
    configuration = {"root": str(tmp_path / "root")}
    with batch_workdir(str(host_dir)) as workdir:
        assert workdir.parent == host_dir.resolve() and stat.S_IMODE(workdir.stat().st_mode) == 0o755
        harness = Harness(grpc_server, "mapped", configuration, False, "csv", workdir,
                          batch_path_map(workdir, str(host_dir), str(server_dir)))
        recorder = RecordingStub(harness.stub)
        harness.stub = recorder
        grpc.channel_ready_future(harness.channel).result(timeout=60)
        harness.run_file(INPUT)
    assert harness.calls > 0 and harness.failures == 0
    expected_prefix = f"{server_dir}/{workdir.name}/"
    assert recorder.paths and all(p.startswith(expected_prefix) for p in recorder.paths), recorder.paths
    assert sorted(recorder.key_paths) == sorted(recorder.paths)
    assert set(recorder.modes) == {0o644}
    assert list(host_dir.iterdir()) == []  # the run's directory is removed afterwards


def test_the_tester_command_takes_a_batch_dir_and_the_servers_path(grpc_server: str, tmp_path: Path) -> None:
    host_dir = tmp_path / "batches"
    server_dir = tmp_path / "server-view"
    host_dir.mkdir()
    server_dir.symlink_to(host_dir)
    conf = tmp_path / "configuration.json"
    (tmp_path / "root").mkdir()  # the storage Test creates no root
    conf.write_text(json.dumps({"root": str(tmp_path / "root")}))
    done = subprocess.run([str(BIN), "tester", "--input", str(INPUT), "--address", grpc_server, "--configuration",
                           str(conf), "--schema-name", "mapped_cli", "--batch-dir", str(host_dir),
                           "--server-batch-dir", str(server_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and " 0 failed" in done.stdout, done.stdout + done.stderr
