"""The Dockerfile passes hadolint and keeps its promises (server as uid 10001 through the entrypoint, port, health
check, ARG BASE); the entrypoint itself runs here, as root, on directories like the ones docker mounts."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    out = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_promises() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE=" in text and "FROM ${BASE}" in text
    assert "EXPOSE 50052" in text and "HEALTHCHECK" in text and "destination.rpc.healthcheck" in text
    assert "useradd --create-home --uid 10001" in text and "openjdk-17-jre-headless" in text
    assert 'ENTRYPOINT ["records-destination-entrypoint", "records-destination", "serve"]' in text
    assert "COPY docker/entrypoint.sh /usr/local/bin/records-destination-entrypoint" in text


ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
SERVER_UID = 10001
OTHER_UID = 4242


@pytest.fixture
def mounts() -> Iterator[Path]:
    """A directory outside pytest's private tmp, so that uid 10001 can reach what is inside (as in a container)."""
    parent = Path(tempfile.mkdtemp(prefix="records-entrypoint-"))
    parent.chmod(0o755)
    shutil.copy(ENTRYPOINT, parent / "entrypoint.sh")  # readable by any user, wherever the work tree is
    yield parent
    shutil.rmtree(parent)


def entrypoint(mounts: Path, data: Path, *command: str, as_uid: int | None = None) -> subprocess.CompletedProcess[str]:
    switch = [] if as_uid is None else ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", "--"]
    return subprocess.run([*switch, "sh", str(mounts / "entrypoint.sh"), *command], capture_output=True, text=True,
                          env={**os.environ, "RECORDS_DESTINATION_DATA": str(data)}, timeout=60)


PROBE = 'id -u; id -g; echo "$HOME"; touch "$RECORDS_DESTINATION_DATA/probe"'


def test_entrypoint_gives_a_root_owned_mount_to_the_server_user(mounts: Path) -> None:
    assert os.geteuid() == 0, "the entrypoint's root branch is tested as root (as CI runs)"
    data = mounts / "data"
    data.mkdir(mode=0o755)  # what the docker daemon creates for -v "$PWD/data:/data" on a fresh host
    done = entrypoint(mounts, data, "sh", "-c", PROBE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(SERVER_UID), str(SERVER_UID), "/home/destination"]
    assert f"entrypoint: {data} is not writable by uid {SERVER_UID}: making that user its owner" in done.stderr
    assert data.stat().st_uid == SERVER_UID and (data / "probe").stat().st_uid == SERVER_UID


def test_entrypoint_leaves_a_directory_the_server_can_write_alone(mounts: Path) -> None:
    data = mounts / "data"
    data.mkdir()
    os.chown(data, OTHER_UID, OTHER_UID)
    data.chmod(0o777)
    done = entrypoint(mounts, data, "sh", "-c", PROBE)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.split()[0] == str(SERVER_UID)
    assert data.stat().st_uid == OTHER_UID and (data / "probe").stat().st_uid == SERVER_UID


def test_entrypoint_started_as_another_user_runs_the_command_as_it_is(mounts: Path) -> None:
    data = mounts / "data"
    data.mkdir(mode=0o755)
    done = entrypoint(mounts, data, "id", "-u", as_uid=OTHER_UID)
    assert done.returncode == 0 and done.stdout.split() == [str(OTHER_UID)], done.stderr
    assert data.stat().st_uid == 0


def test_entrypoint_starts_the_server_even_when_the_owner_cannot_change(mounts: Path) -> None:
    data = mounts / "data"
    data.mkdir(mode=0o755)
    refusing = mounts / "bin"  # a chown that fails, as on a read-only or root-squashed mount
    refusing.mkdir()
    (refusing / "chown").write_text("#!/bin/sh\necho 'chown: Operation not permitted' >&2\nexit 1\n")
    (refusing / "chown").chmod(0o755)
    done = subprocess.run(["sh", str(mounts / "entrypoint.sh"), "id", "-u"], capture_output=True, text=True,
                          env={**os.environ, "RECORDS_DESTINATION_DATA": str(data),
                               "PATH": f"{refusing}:{os.environ['PATH']}"}, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == [str(SERVER_UID)], done.stderr
    assert (f"entrypoint: cannot change the owner of {data}; make it writable for uid {SERVER_UID} on the host "
            f"(e.g. sudo chown {SERVER_UID} <dir>)") in done.stderr
    assert data.stat().st_uid == 0
