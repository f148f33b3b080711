"""A real PostgreSQL server for the tests (Debian's `postgresql`): `initdb` and `pg_ctl` from
/usr/lib/postgresql/<version>/bin in a temporary directory, listening on 127.0.0.1 at a free port, with password
authentication (so wrong credentials are refused as a real server refuses them). Run as root, the server runs as
the `postgres` user (PostgreSQL refuses root)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.s3server import free_port

USER = "catalog_tests"
PASSWORD = "tests-password-not-a-real-credential"


@dataclass
class PostgresServer:
    port: int
    workdir: Path
    bindir: Path
    run_as: list[str]

    def url(self, database: str = "postgres", password: str = PASSWORD) -> str:
        return f"postgresql+psycopg://{USER}:{password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def stop(self) -> None:
        subprocess.run([*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.workdir / "data"), "-m", "fast",
                        "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql (scripts/bootstrap does)")
    return Path(found[-1]).parent


def start_postgres() -> PostgresServer:
    bindir = _bindir()
    workdir = Path(tempfile.mkdtemp(prefix="postgres-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(workdir, "postgres")
    (workdir / "pw").write_text(PASSWORD)
    if run_as:
        shutil.chown(workdir / "pw", "postgres")
    subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(workdir / "data"), "-U", USER, "--auth=scram-sha-256",
                    f"--pwfile={workdir / 'pw'}", "-E", "UTF8", "--no-locale"], check=True, capture_output=True,
                   timeout=120)
    port = free_port()
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={workdir} -c fsync=off"
    result = subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(workdir / "data"), "-o", options, "-l",
                             str(workdir / "log"), "-w", "-t", "60", "start"], capture_output=True, timeout=90)
    if result.returncode != 0:
        log = (workdir / "log").read_text() if (workdir / "log").exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {result.stderr.decode()[-1000:]} {log[-2000:]}")
    server = PostgresServer(port, workdir, bindir, run_as)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            server.create_database("ready_probe")
            return server
        except Exception:
            time.sleep(0.3)
    server.stop()
    raise RuntimeError("PostgreSQL did not accept connections within 30 s")
