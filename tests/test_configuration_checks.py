"""Configuration mistakes get a precise answer through the real server: unknown fields, mistyped S3 roots,
invalid or scheme-less S3 endpoints and an https endpoint that speaks plain HTTP."""
from __future__ import annotations

from pathlib import Path

import pytest

from destination.protocol import common, sdk
from destination.storage.opening import open_storage
from tests.conftest import s3_configuration, spec_of
from tests.rpc_helpers import table
from tests.test_write_path import SYS


def storage_test(stub, configuration: dict[str, str]) -> common.TestResponse:  # type: ignore[no-untyped-def]
    return stub.Test(common.TestRequest(name="storage", configuration=configuration))


def create_answer(stub, configuration: dict[str, str]) -> sdk.CreateTableResponse:  # type: ignore[no-untyped-def]
    t = table("t", [("id", "INT", True), *SYS])
    return stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="conf", table=t))


def test_an_unknown_field_is_a_warning_naming_it_and_the_known_ones(stub, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    answer = storage_test(stub, {"root": str(tmp_path), "rooot": str(tmp_path / "typo")})
    assert answer.success, answer
    assert ("configuration field(s) 'rooot' unknown and ignored; the known fields are root, s3_endpoint, s3_region, "
            "aws_access_key_id, aws_secret_access_key, target_file_size, changes") in capsys.readouterr().out


@pytest.mark.parametrize("root", ["s3:/bucket/x", "s3//bucket/x", "S3://bucket/x"])
def test_a_mistyped_s3_root_is_a_task_not_a_local_folder(stub, root: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # a relative root would be created here
    answer = create_answer(stub, {"root": root})
    assert answer.WhichOneof("response") == "task", answer
    assert f"root {root!r} looks like a mistyped S3 URL: write s3://bucket/prefix (lower case, two slashes)" \
        in answer.task.message
    assert list(tmp_path.iterdir()) == []
    failed = storage_test(stub, {"root": root})
    assert "looks like a mistyped S3 URL" in failed.failure


@pytest.mark.parametrize("endpoint", ["http://my host:8333", "http://127.0.0.1:99999", "ftp://127.0.0.1:8333",
                                      "http://a_b:8333"])
def test_an_invalid_s3_endpoint_is_a_task_checked_before_the_credentials(stub, endpoint: str) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": "s3://bucket/x", "s3_endpoint": endpoint}  # and no credentials
    expected = (f"s3_endpoint {endpoint!r} is not a valid endpoint URL: expected http://host:port or "
                "https://host[:port]")
    answer = create_answer(stub, configuration)
    assert answer.WhichOneof("response") == "task" and expected in answer.task.message, answer
    assert expected in storage_test(stub, configuration).failure


def test_an_s3_endpoint_without_a_scheme_is_refused_not_taken_as_http(stub) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": "s3://bucket/x", "s3_endpoint": "localhost:9000"}
    expected = "s3_endpoint 'localhost:9000' names no scheme: write http://localhost:9000 or https://localhost:9000"
    answer = create_answer(stub, configuration)
    assert answer.WhichOneof("response") == "task" and expected in answer.task.message, answer
    assert expected in storage_test(stub, configuration).failure


def test_https_to_a_plain_http_endpoint_says_so_in_words(stub, s3_server) -> None:  # type: ignore[no-untyped-def]
    configuration = s3_configuration(s3_server, "tls")
    configuration["s3_endpoint"] = configuration["s3_endpoint"].replace("http://", "https://")
    failure = storage_test(stub, configuration).failure
    assert "failed the TLS handshake" in failure and "the endpoint does not speak HTTPS (use http://)" in failure, failure


def _root_listing(configuration: dict[str, str], s3_server) -> set[str]:  # type: ignore[no-untyped-def]
    """Every entry under the root and the root's own entry in its parent, as the storage itself lists them (S3: the
    objects and the 'folders' SeaweedFS's filer keeps; local: files and folders)."""
    root = configuration["root"]
    if not root.startswith("s3://"):
        top = Path(root)
        below = {str(p.relative_to(top)) for p in top.rglob("*")} if top.is_dir() else set()
        return below | ({"<root>"} if top.exists() else set())
    bucket, _, prefix = root[len("s3://"):].partition("/")
    client = s3_server.client()
    seen: set[str] = set()
    for start, delimiter in ((f"{prefix}/", None), (f"{prefix}/", "/"), ("", "/")):
        kwargs = {"Bucket": bucket, "Prefix": start, **({"Delimiter": delimiter} if delimiter else {})}
        for page in client.get_paginator("list_objects_v2").paginate(**kwargs):
            seen |= {o["Key"] for o in page.get("Contents", [])} | {p["Prefix"] for p in page.get("CommonPrefixes", [])}
    return {name for name in seen if name.startswith(f"{prefix}/") or name == prefix}


@pytest.mark.parametrize("state", ["empty", "holding a file"])
def test_a_storage_test_leaves_the_root_as_it_found_it(stub, configuration, request, state: str) -> None:  # type: ignore[no-untyped-def]
    s3 = request.getfixturevalue("s3_server") if configuration["root"].startswith("s3://") else None
    if state == "holding a file":
        spec = spec_of(configuration)
        open_storage(spec).write_bytes("kept.txt", b"the user's")
    before = _root_listing(configuration, s3)
    answer = storage_test(stub, configuration)
    assert answer.success, answer
    assert _root_listing(configuration, s3) == before


def test_a_storage_test_of_a_missing_local_folder_creates_nothing_and_says_so(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for missing in (tmp_path / "absent", tmp_path / "no" / "such" / "chain"):
        answer = storage_test(stub, {"root": str(missing)})
        assert answer.failure == (f"the root directory {str(missing)!r} does not exist: the Test creates nothing; "
                                  "create the folder or fix `root`"), answer
    assert list(tmp_path.iterdir()) == []
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    answer = storage_test(stub, {"root": str(blocker)})
    assert answer.failure == (f"the root {str(blocker)!r} is a file, not a directory: the Test creates nothing; "
                              "create the folder or fix `root`"), answer


def test_every_bad_field_is_named_in_one_answer(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path), "changes": "sometimes", "target_file_size": "huge",
                     "retention_versions": "0", "layout": "flat"}
    expected = ["configuration field 'changes' is 'sometimes'", "configuration field 'target_file_size' is 'huge'",
                "configuration field 'retention_versions': 0 is below 1", "configuration field 'layout': 'flat'"]
    failure = storage_test(stub, configuration).failure  # the first alone was named: one Test per mistake
    assert all(message in failure for message in expected), failure
    answer = create_answer(stub, configuration)
    assert answer.WhichOneof("response") == "task", answer
    assert all(message in answer.task.message for message in expected), answer.task.message
    assert list(tmp_path.iterdir()) == []
