"""Every file and directory the destination writes on local disk is readable by other users, per the umask."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from destination.storage.local import process_umask
from tests.rpc_helpers import table
from tests.test_write_path import SYS, create, write

OTHER_UID = 65534  # nobody: a user that owns none of the files


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A root whose parents other users can traverse (pytest's tmp_path is under a 0700 directory)."""
    parent = Path(tempfile.mkdtemp(prefix="records-modes-"))
    parent.chmod(0o755)
    yield parent / "root"
    shutil.rmtree(parent)


def test_tables_are_readable_by_another_user(stub, shared_root: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(shared_root)}
    t = table("t", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "modes", t)
    write(stub, configuration, "modes", t, tmp_path, [{"id": "1", "v": "a", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}])
    umask = process_umask()
    files = [p for p in shared_root.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"_manifest", "_latest", "_schema.json", "_files.json", "_table.json"} <= names, names
    for path in [shared_root, *shared_root.rglob("*")]:
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        assert stat.S_IMODE(path.stat().st_mode) == expected, f"{path}: {oct(path.stat().st_mode)}"
    if os.geteuid() == 0:  # real reads as a second user
        read = subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", "--",
                               "cat", *map(str, files)], capture_output=True)
        assert read.returncode == 0, read.stderr.decode()
        assert len(read.stdout) == sum(p.stat().st_size for p in files)
