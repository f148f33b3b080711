"""Shared fixtures: one SparkSession, one SeaweedFS S3 server and one gRPC server per test session;
tests that touch storage run on both backends (local directory and S3)."""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from destination.on_disk.options import LAYOUT_FIELD, LAYOUTS, default_layout
from destination.rpc.service import DestinationService
from destination.runtime.settings import ServerOptions
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import Retention, TableStore
from testbed.s3server import ACCESS_KEY, SECRET_KEY, S3Server, start_seaweedfs
from tests import serverproc
from tests.tester_inputs import missing_input

BUCKET = "records-tests"
TABLE_BUCKET = "warehouse"  # an S3 Tables bucket: the warehouse of SeaweedFS's Iceberg REST catalog


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--layout", choices=LAYOUTS, default=None,
                     help="the version layout of the tests' configurations and stores (default: each backend's)")


def layout_option(config: pytest.Config) -> str | None:
    value = config.getoption("--layout")
    return str(value) if value else None


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from destination.process.spark_session import get_session

    return get_session("local[2]")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = start_seaweedfs((TABLE_BUCKET,))
    server.create_bucket(BUCKET)
    yield server
    server.stop()


def s3_configuration(server: S3Server, prefix: str) -> dict[str, str]:
    return {"root": f"s3://{BUCKET}/{prefix}", "s3_endpoint": server.endpoint, "s3_region": "us-east-1",
            "aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}


@pytest.fixture(params=["local", "s3"])
def configuration(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A fresh, empty root on each backend, as a request's configuration map."""
    chosen = layout_option(request.config)
    extra = {LAYOUT_FIELD: chosen} if chosen else {}
    if request.param == "local":
        root = tmp_path / "root"
        root.mkdir()  # as a user creates it: the storage Test creates no folder
        return {"root": str(root), **extra}
    server = request.getfixturevalue("s3_server")
    return {**s3_configuration(server, f"t-{uuid.uuid4().hex[:12]}"), **extra}


def spec_of(configuration: dict[str, str]) -> StorageSpec:
    return StorageSpec(root=configuration["root"], s3_endpoint=configuration.get("s3_endpoint", ""),
                       s3_region=configuration.get("s3_region", ""),
                       access_key_id=configuration.get("aws_access_key_id", ""),
                       secret_access_key=configuration.get("aws_secret_access_key", ""))


@pytest.fixture
def storage(configuration: dict[str, str]) -> Storage:
    return open_storage(spec_of(configuration))


@pytest.fixture
def store(storage: Storage, request: pytest.FixtureRequest) -> TableStore:
    """A store writing in the layout `--layout` names, or the server's default for the backend."""
    chosen = layout_option(request.config) or default_layout(storage.spec.is_s3)
    return TableStore(storage, Retention(keep_versions=2, min_age_seconds=3600), layout=chosen)


@pytest.fixture(scope="session")
def grpc_endpoint(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DestinationService]]:  # type: ignore[no-untyped-def]
    """A real server on a loopback socket (in this process, sharing the test Spark session), and its servicer."""
    from destination.rpc.server import build_server
    from testbed.s3server import free_port

    root = tmp_path_factory.mktemp("server-root")
    port = free_port()
    server, health, service, bound = build_server(ServerOptions(root=str(root), spark_master="local[2]"), port)
    server.start()
    from grpc_health.v1 import health_pb2

    health.set("", health_pb2.HealthCheckResponse.SERVING)
    yield f"127.0.0.1:{bound}", service
    server.stop(5).wait()


@pytest.fixture(scope="session")
def grpc_server(grpc_endpoint: tuple[str, DestinationService]) -> str:
    return grpc_endpoint[0]


@pytest.fixture
def server_options(grpc_endpoint: tuple[str, DestinationService],
                   monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Change the in-process server's options for one test: the server reads its settings (the environment
    included) once when it starts, so setting a variable while it runs has no effect."""
    service = grpc_endpoint[1]
    return lambda **changes: change_options(service, monkeypatch, **changes)


def change_options(service: DestinationService, monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """The service's options changed for one test, where every part the server's assembly gave them holds them
    (the service's handlers and its roots' write paths)."""
    changed = replace(service.options, **changes)
    monkeypatch.setattr(service, "options", changed)
    monkeypatch.setattr(service.roots, "options", changed)


@pytest.fixture
def through_spark_tasks(grpc_endpoint: tuple[str, DestinationService], monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process server decodes every request's files in Spark tasks (small_request_bytes 0), for one test."""
    change_options(grpc_endpoint[1], monkeypatch, small_request_bytes=0)


@pytest.fixture(scope="session")
def stub(grpc_server: str):  # type: ignore[no-untyped-def]
    from destination.protocol import sdk_grpc

    channel = grpc.insecure_channel(grpc_server)
    return sdk_grpc.DestinationConnectorStub(channel)


@pytest.fixture(scope="session")
def iceberg_java():  # type: ignore[no-untyped-def]
    """Iceberg's Java library in Spark 3.5 (tests/iceberg_spark.py): its environment made once, then the reader.
    A setup that fails fails the test with its reason (never a skip)."""
    from tests import iceberg_spark

    iceberg_spark.ensure_environment()
    return iceberg_spark.read_tables


SERVER_FIXTURES = ("stub", "grpc_server", "grpc_endpoint")  # a server called over a socket (in this process)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by what it needs: Spark (the session, the in-process server, a `serve` process: the `serve`
    marker, which tests/serverproc.py insists on; or a `spark` marker set by hand, for a Spark driver process of
    the test's own), S3 (the SeaweedFS server, the s3 backend), PostgreSQL (the sql catalog's server); and by tier:
    `e2e` (a server called over a socket), `integration` (real Spark, S3 or PostgreSQL, no server), `unit` (none of
    them). `-m unit` (the same as `-m "not spark and not s3 and not postgres"`) selects the quick tests, which need
    no system package."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        serve = item.get_closest_marker("serve") is not None
        if serve:
            serverproc.SERVE_MARKED.add(item.nodeid)
        # iceberg_java: Spark 3.5 with Iceberg's Java library; a `spark` marker set by hand counts too
        spark = "spark" in names or "iceberg_java" in names or serve or item.get_closest_marker("spark") is not None
        s3 = "s3_server" in names or params.get("configuration") == "s3"
        # PostgreSQL: a system package (apt), which the quick tier does without
        postgres = "postgres_server" in names or params.get("catalog_uri") == "postgresql"
        if spark:
            item.add_marker(pytest.mark.spark)
        if s3:
            item.add_marker(pytest.mark.s3)
        if postgres:
            item.add_marker(pytest.mark.postgres)
        if serve or any(name in names for name in SERVER_FIXTURES):
            item.add_marker(pytest.mark.e2e)
        elif spark or s3 or postgres or item.get_closest_marker("integration") is not None:  # or marked by hand
            item.add_marker(pytest.mark.integration)
        else:
            item.add_marker(pytest.mark.unit)
    # the README's walkthrough needs its fixed ports (50052, 9464), and 50052 lies in Linux's ephemeral range: late in
    # a full run it was once held (a port another test's socket was given) and the walkthrough could not start. It
    # runs first, before any other test opens a socket.
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_walkthrough.py"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test given a tester input that is missing fails naming it, before its fixtures start servers."""
    problem = missing_input(getattr(getattr(item, "callspec", None), "params", {}).values())
    if problem is not None:
        pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A PostgreSQL server on 127.0.0.1 (tests/postgres.py), the team catalog's database."""
    from tests.postgres import start_postgres

    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty `sql` catalog database: SQLite in a file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    server = request.getfixturevalue("postgres_server")
    name = f"catalog_{uuid.uuid4().hex[:12]}"
    server.create_database(name)
    return str(server.url(name))


@pytest.fixture(scope="session")
def glue_endpoint() -> Iterator[str]:
    """AWS Glue's API as moto's server mode serves it on 127.0.0.1: the only Glue that runs here."""
    from moto.server import ThreadedMotoServer

    from testbed.s3server import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()
