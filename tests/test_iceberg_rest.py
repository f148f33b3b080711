"""The Iceberg REST catalog `serve --iceberg-rest-port` serves (destination/iceberg_rest/), read by real clients:
pyiceberg's `RestCatalog` and DuckDB's iceberg extension (`ATTACH … (TYPE iceberg, ENDPOINT …)`), on local and S3
roots. (Iceberg's Java `RESTCatalog` is not run: the Spark runtime jar PyPI carries lacks the shaded Apache
HttpClient 5 it calls through, and Debian's, 5.2, predates the TLS API Iceberg 1.10 uses.) Every table the
public tester inputs write (plain, history, every migration: drops and renames followed) is found by name and reads
the rows of its latest records version, and of the previous version by snapshot id; a commit made after a client
attached is seen on its next load; a wrong or missing token is refused and every write answered as unsupported."""
from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError

from destination.iceberg_rest.server import IcebergRestOptions, IcebergRestServer
from destination.iceberg_rest.tables import RECHECK_SECONDS, RootTables, served_name
from destination.iceberg_rest.warehouses import Warehouses
from destination.rpc.service import DestinationService
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion
from destination.table_formats.sync import TableFormatPublisher, table_formats_named
from destination.tester.harness import Harness
from destination.write.one_step import commit_one_step
from tests.conftest import spec_of
from tests.lake_readers import _extension, own_duck, rows
from tests.test_table_formats import TESTER_INPUTS, columns_in, records_rows
from tests.test_table_store import appender

TOKEN = "served-catalog-token-7f3a"


@dataclass(frozen=True)
class Served:
    url: str
    warehouses: Warehouses
    token_file: str


def write_token(directory: Path, token: str = TOKEN) -> str:
    path = directory / "token"
    path.write_text(token + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def served(grpc_endpoint: tuple[str, DestinationService], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The catalog on the in-process server, as `serve --iceberg-rest-port` starts it: its root and every root its
    requests write to from now on (the service's new stores tell the index of their commits and drops)."""
    _, service = grpc_endpoint
    warehouses = Warehouses(open_storage(StorageSpec(root=service.options.root)))
    token_file = write_token(tmp_path_factory.mktemp("served"))
    server = IcebergRestServer(warehouses, IcebergRestOptions(0, token_file))
    server.start()
    service.roots.served = warehouses
    yield Served(f"http://127.0.0.1:{server.port}", warehouses, token_file)
    service.roots.served = None
    server.stop()


def pyiceberg_client(url: str, configuration: dict[str, str], token: str = TOKEN, **extra: str) -> RestCatalog:
    """pyiceberg's RestCatalog on the root of `configuration`; on S3 the client brings its own access key (the
    catalog vends none), the endpoint comes from the catalog's load answer."""
    properties = {"uri": url, "token": token, "warehouse": configuration["root"], **extra}
    if "aws_access_key_id" in configuration:
        properties |= {"s3.access-key-id": configuration["aws_access_key_id"],
                       "s3.secret-access-key": configuration["aws_secret_access_key"]}
    return RestCatalog("served", **properties)


def duckdb_client(url: str, configuration: dict[str, str], token: str = TOKEN) -> Any:
    """DuckDB with the catalog attached as `lake` (httpfs is needed for the REST calls, S3 or not)."""
    import duckdb_extension_httpfs

    con = own_duck(spec_of(configuration))  # its secret and attached catalog are its own
    if "aws_access_key_id" not in configuration:
        con.execute(f"LOAD '{_extension(duckdb_extension_httpfs)}'")
    con.execute("CREATE SECRET served (TYPE iceberg, TOKEN ?)", [token])
    con.execute(f"ATTACH '{configuration['root']}' AS lake (TYPE iceberg, SECRET served, ENDPOINT '{url}', "
                "ACCESS_DELEGATION_MODE 'none')")
    return con


def quoted(*names: str) -> str:
    return ".".join('"' + n.replace('"', '""') + '"' for n in names)


def duck_rows(con: Any, schema: str, table: str, version: int | None = None) -> Any:
    travel = f" AT (VERSION => {version})" if version is not None else ""
    return con.execute(f"SELECT * FROM lake.{quoted(served_name(schema), served_name(table))}{travel}").to_arrow_table()


def http(url: str, method: str = "GET", token: str | None = TOKEN,
         context: ssl.SSLContext | None = None) -> tuple[int, dict[str, Any] | None, str]:
    """A raw request: its status, JSON answer (None for none) and WWW-Authenticate header."""
    request = urllib.request.Request(url, method=method, data=b"{}" if method in ("POST", "PUT") else None)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            body = answer.read()
            return answer.status, json.loads(body) if body else None, ""
    except urllib.error.HTTPError as error:
        body = error.read()
        return error.code, json.loads(body) if body else None, error.headers.get("WWW-Authenticate", "")


@dataclass(frozen=True)
class Expected:
    schema: str
    table: str
    columns: list[str]
    latest: TableVersion
    previous: TableVersion | None


def run_tester_inputs(grpc_server: str, configuration: dict[str, str], tmp_path: Path) -> tuple[Storage, list[Expected]]:
    """Every public tester input into the root, each in a schema of its own; the tables left and what each must
    read as (its latest records version, and the one before)."""
    storage = open_storage(spec_of(configuration))
    store = TableStore(storage)
    expected = []
    for index, path in enumerate(TESTER_INPUTS):
        schema = f"in{index}"
        (tmp_path / schema).mkdir()
        harness = Harness(grpc_server, schema, configuration, plain_text=False, batch_file_type="csv",
                          workdir=tmp_path / schema)
        harness.run_file(path)
        assert harness.failures == 0, path
        for table in store.list_tables(schema):
            latest = store.load(schema, table)
            assert latest is not None
            previous = store.load(schema, table, latest.version - 1) if latest.version > 1 else None
            expected.append(Expected(schema, table, columns_in(latest.table, "iceberg"), latest, previous))
    return storage, expected


def check_rows(label: str, read: Any, storage: Storage, version: TableVersion, columns: list[str]) -> None:
    assert rows(read, columns) == rows(records_rows(storage, version), columns), label


def common_columns(storage: Storage, e: Expected) -> list[str]:
    assert e.previous is not None
    return [c for c in columns_in(e.previous.table, "iceberg") if c in e.columns]


def test_every_tester_table_is_read_through_the_served_catalog(  # type: ignore[no-untyped-def]
        grpc_server, served: Served, configuration: dict[str, str], tmp_path: Path) -> None:
    """The public tester inputs into a fresh root (local and S3), then through the served catalog: each client
    lists exactly the tables the root holds (drops and renames followed) and reads every one's latest rows and,
    by snapshot id, the previous version's (the columns both versions have); its schema is the latest one (ALTERs
    followed)."""
    storage, expected = run_tester_inputs(grpc_server, configuration, tmp_path)
    assert any(e.previous is not None for e in expected), "no table with a previous version: time travel not covered"

    catalog = pyiceberg_client(served.url, configuration)
    for schema in {e.schema for e in expected}:
        assert sorted(t for _, t in catalog.list_tables(served_name(schema))) == sorted(
            served_name(e.table) for e in expected if e.schema == schema)
    con = duckdb_client(served.url, configuration)
    for e in expected:
        label = f"{e.schema}.{e.table}"
        table = catalog.load_table((served_name(e.schema), served_name(e.table)))
        assert table.metadata_location == storage.url(f"{e.latest.prefix}/metadata/v{e.latest.version}.metadata.json")
        assert [f.name for f in table.schema().fields] == e.columns, label
        check_rows(f"pyiceberg {label}", table.scan().to_arrow(), storage, e.latest, e.columns)
        check_rows(f"duckdb {label}", duck_rows(con, e.schema, e.table), storage, e.latest, e.columns)
        if e.previous is not None:
            common = common_columns(storage, e)
            check_rows(f"pyiceberg {label} v{e.previous.version}", table.scan(snapshot_id=e.previous.version).to_arrow(),
                       storage, e.previous, common)
            check_rows(f"duckdb {label} v{e.previous.version}", duck_rows(con, e.schema, e.table, e.previous.version),
                       storage, e.previous, common)
    if storage.spec.is_s3:  # what a client is told to read the files with: the endpoint, never the key
        first = expected[0]
        prefix = served.warehouses.named(configuration["root"])
        assert prefix is not None
        _, answer, _ = http(f"{served.url}/v1/{prefix.prefix}/namespaces/{served_name(first.schema)}/tables/"
                            f"{served_name(first.table)}")
        assert answer is not None
        assert answer["config"] == {"s3.endpoint": configuration["s3_endpoint"], "s3.path-style-access": "true",
                                    "s3.region": configuration["s3_region"], "client.region": configuration["s3_region"]}
        assert configuration["aws_secret_access_key"] not in json.dumps(answer)


def watched_store(served: Served, storage: Storage) -> TableStore:
    """A store of this process as the server's are: its commits and drops told to the served catalog."""
    observer, dropped = served.warehouses.watch(storage, lambda event: None)
    return TableStore(storage, publish=TableFormatPublisher(table_formats_named(["iceberg"])), observer=observer, dropped=dropped)


def ids_of(table: Any) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_a_commit_after_attach_is_seen_on_the_next_load_and_a_drop_at_once(served: Served, tmp_path: Path) -> None:
    """This process's commit is answered on the very next load (no wait for the pointer's re-check), by pyiceberg
    and by an attached DuckDB; another writer's within the re-check interval; this process's drop at once."""
    configuration = {"root": str(tmp_path / "root")}
    storage = open_storage(spec_of(configuration))
    store = watched_store(served, storage)
    commit_one_step(store, "sales", "events", appender(storage, 1))
    catalog = pyiceberg_client(served.url, configuration)
    con = duckdb_client(served.url, configuration)
    assert ids_of(catalog.load_table(("sales", "events")).scan().to_arrow()) == [1, 2, 3]
    assert ids_of(duck_rows(con, "sales", "events")) == [1, 2, 3]
    commit_one_step(store, "sales", "events", appender(storage, 10))
    assert ids_of(catalog.load_table(("sales", "events")).scan().to_arrow()) == [1, 2, 3, 10, 11, 12]
    assert ids_of(duck_rows(con, "sales", "events")) == [1, 2, 3, 10, 11, 12]

    other = TableStore(storage, publish=TableFormatPublisher(table_formats_named(["iceberg"])))  # another process's writer
    commit_one_step(other, "sales", "events", appender(storage, 20))
    started = time.monotonic()
    while len(ids_of(catalog.load_table(("sales", "events")).scan().to_arrow())) != 9:
        assert time.monotonic() - started < RECHECK_SECONDS + 2, "another writer's commit not seen"
        time.sleep(0.1)

    store.drop("sales", "events")
    assert not catalog.table_exists(("sales", "events"))
    with pytest.raises(NoSuchTableError):
        catalog.load_table(("sales", "events"))


def test_a_pointer_naming_a_file_that_is_gone_is_answered_with_the_newest_there_is(tmp_path: Path) -> None:
    """Never a metadata file that is not there: a hint naming a deleted file falls back to the newest file left;
    a table without metadata is not found."""
    storage = open_storage(StorageSpec(root=str(tmp_path)))
    store = TableStore(storage, publish=TableFormatPublisher(table_formats_named(["iceberg"])))
    for first in (1, 10, 20):
        commit_one_step(store, "s", "t", appender(storage, first))
    prefix = store.table_prefix("s", "t")
    tables = RootTables(storage)
    loaded = tables.load("s", "t")
    assert loaded is not None and loaded.version == 3
    storage.delete(f"{prefix}/metadata/v3.metadata.json")
    tables = RootTables(storage)
    loaded = tables.load("s", "t")
    assert loaded is not None and loaded.version == 2
    assert loaded.metadata == storage.read_bytes(f"{prefix}/metadata/v2.metadata.json")
    storage.delete(f"{prefix}/metadata/version-hint.text")
    assert RootTables(storage).load("s", "t") is None


def test_a_wrong_or_missing_token_is_refused_and_writes_are_unsupported(served: Served, tmp_path: Path,
                                                                          capfd: pytest.CaptureFixture[str]) -> None:
    configuration = {"root": str(tmp_path / "root")}
    storage = open_storage(spec_of(configuration))
    commit_one_step(watched_store(served, storage), "sales", "events", appender(storage, 1))
    for token in (None, "wrong-token", ""):
        status, answer, challenge = http(f"{served.url}/v1/config", token=token)
        assert status == 401 and answer is not None and answer["error"]["type"] == "NotAuthorizedException"
        assert challenge.startswith("Bearer")
        status, _, _ = http(f"{served.url}/v1/namespaces/sales/tables/events", token=token)
        assert status == 401
    with pytest.raises(Exception, match=r"401|[Uu]nauthorized|NotAuthorized"):
        pyiceberg_client(served.url, configuration, token="wrong-token").list_namespaces()
    with pytest.raises(Exception, match=r"401|[Uu]nauthorized"):
        duckdb_client(served.url, configuration, token="wrong-token").execute("SHOW ALL TABLES").fetchall()

    prefix = served.warehouses.named(configuration["root"])
    assert prefix is not None
    base = f"{served.url}/v1/{prefix.prefix}/namespaces"
    for method, url in (("POST", base), ("POST", f"{base}/sales/tables"), ("POST", f"{base}/sales/tables/events"),
                        ("DELETE", f"{base}/sales/tables/events"), ("DELETE", f"{base}/sales"),
                        ("POST", f"{served.url}/v1/{prefix.prefix}/tables/rename")):
        status, answer, _ = http(url, method=method)
        assert (status, answer and answer["error"]["type"]) == (406, "UnsupportedOperationException"), (method, url)
    catalog = pyiceberg_client(served.url, configuration)
    with pytest.raises(Exception, match="does not support endpoint"):  # not among the config's endpoints
        catalog.drop_table(("sales", "events"))
    assert catalog.table_exists(("sales", "events"))
    assert http(f"{served.url}/v1/config?warehouse=/nowhere")[0] == 400
    assert TOKEN not in capfd.readouterr().err


def self_signed(directory: Path) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_tls_serves_the_catalog_to_a_client_trusting_the_certificate(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With a certificate and key the catalog answers over TLS only: a client that does not trust the
    certificate fails the handshake, pyiceberg given it as `ssl.cabundle` reads the table."""
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # requests lets them override `ssl.cabundle`
        monkeypatch.delenv(variable, raising=False)
    cert, key = self_signed(tmp_path)
    storage = open_storage(StorageSpec(root=str(tmp_path / "root")))
    commit_one_step(TableStore(storage, publish=TableFormatPublisher(table_formats_named(["iceberg"]))), "sales", "events", appender(storage, 1))
    server = IcebergRestServer(Warehouses(storage), IcebergRestOptions(0, write_token(tmp_path), cert, key))
    server.start()
    try:
        url = f"https://localhost:{server.port}"
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            http(f"{url}/v1/config")
        catalog = RestCatalog("tls", uri=url, token=TOKEN, **{"ssl": {"cabundle": cert}})
        assert ids_of(catalog.load_table(("sales", "events")).scan().to_arrow()) == [1, 2, 3]
    finally:
        server.stop()


def test_the_serve_options_are_checked_before_the_server_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from destination.cli import main

    root = ["serve", "--root", str(tmp_path / "root")]
    cases = {
        ("--iceberg-rest-port", "9181"): "needs --iceberg-rest-token-file",
        ("--iceberg-rest-token-file", str(tmp_path / "t")): "need --iceberg-rest-port",
        ("--iceberg-rest-port", "9181", "--iceberg-rest-token-file", str(tmp_path / "missing")): "missing",
        ("--iceberg-rest-port", "9181", "--iceberg-rest-token-file", write_token(tmp_path),
         "--iceberg-rest-tls-cert", str(tmp_path / "token")): "go together",
    }
    (tmp_path / "empty").write_text("\n")
    cases[("--iceberg-rest-port", "9181", "--iceberg-rest-token-file", str(tmp_path / "empty"))] = "is empty"
    for extra, message in cases.items():
        assert main(root + list(extra)) == 1, extra
        err = capsys.readouterr().err
        assert message in err and TOKEN not in err, (extra, err)
    assert os.path.exists(tmp_path / "root")


def test_the_guides_python_example_runs_as_written(served: Served, tmp_path: Path) -> None:
    """docs/guide/catalogs.md's pyiceberg and DuckDB example, its address, token file, root, table and version
    replaced by the test's: it reads the latest rows and the previous version's."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "catalogs.md").read_text(encoding="utf-8")
    section = guide[guide.index("## The destination's own catalog"):]
    example = section[section.index("```python\n") + len("```python\n"):]
    example = example[:example.index("```")]
    root = tmp_path / "root"
    storage = open_storage(StorageSpec(root=str(root)))
    store = watched_store(served, storage)
    commit_one_step(store, "sales", "events", appender(storage, 1))
    commit_one_step(store, "sales", "events", appender(storage, 10))
    replaced = {"http://localhost:9181": served.url, "/etc/fivetran/iceberg-token": served.token_file,
                "'/data'": f"'{root}'", '"/data"': f'"{root}"', "my_schema": "sales", "my_table": "events",
                "snapshot_id=12": "snapshot_id=1", "VERSION => 12": "VERSION => 1"}
    for old, new in replaced.items():
        assert old in example, old
        example = example.replace(old, new)
    names: dict[str, Any] = {}
    exec(compile(example, "docs/guide/catalogs.md", "exec"), names)
    assert ids_of(names["latest"]) == [1, 2, 3, 10, 11, 12] and ids_of(names["before"]) == [1, 2, 3]
    assert sorted(r[0] for r in names["rows"]) == [1, 2, 3, 10, 11, 12]
    assert sorted(r[0] for r in names["rows_before"]) == [1, 2, 3]
