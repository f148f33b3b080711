"""A request's identity: how a retried request is recognised without hashing its files before the write starts."""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from destination.runtime.errors import BadBatchFile
from destination.write.batches import BatchIdentity, plan_batch
from tests.batchfiles import FMT

pytestmark = pytest.mark.unit


def _files(tmp_path: Path, body: bytes = b"bytes as sent") -> dict[str, list[str]]:
    replace, delete = tmp_path / "a.csv.zstd.aes", tmp_path / "b.csv.zstd.aes"
    replace.write_bytes(body)
    delete.write_bytes(b"other bytes")
    return {"replace": [str(replace)], "delete": [str(delete)]}


def test_a_retry_is_recognised_by_its_recorded_identity_and_by_an_id_recorded_before_fingerprints(
        tmp_path: Path) -> None:
    files = _files(tmp_path)
    first = plan_batch(files, {}, FMT).identity
    retry = plan_batch(files, {}, FMT).identity
    assert retry.value == first.value
    assert retry.seen_in(["0123456789abcdef:00", first.value])
    # the digest alone, as versions written before fingerprints recorded it: every file's role, name and bytes
    old = hashlib.sha256()
    for kind, path in (("replace", tmp_path / "a.csv.zstd.aes"), ("delete", tmp_path / "b.csv.zstd.aes")):
        old.update(f"{kind}\x00{path.name}\x00".encode() + path.read_bytes())
    assert retry.seen_in([old.hexdigest()])
    assert not retry.seen_in([hashlib.sha256(b"another request").hexdigest()])


def test_files_of_the_same_names_and_sizes_with_other_bytes_are_another_request(tmp_path: Path) -> None:
    before = plan_batch(_files(tmp_path, b"bytes as sent"), {}, FMT).identity
    recorded = before.value  # hashed before the files change
    after = plan_batch(_files(tmp_path, b"BYTES AS SENT"), {}, FMT).identity
    assert after.fingerprint == before.fingerprint  # same roles, names and sizes: the digest decides
    assert not after.seen_in([recorded])


def test_no_wait_for_the_digest_when_no_recorded_identity_could_be_this_request() -> None:
    pending: Future[str] = Future()  # a digest that never completes: waiting for it would block
    identity = BatchIdentity("f" * 16, pending)
    answers: list[bool] = []
    worker = threading.Thread(target=lambda: answers.append(identity.seen_in(["0123456789abcdef:00"] * 20)),
                              daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert answers == [False]
    waiting = threading.Thread(target=lambda: answers.append(identity.seen_in([f"{'f' * 16}:00"])), daemon=True)
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive(), "the same fingerprint must wait for the digest"
    pending.set_result("01")
    waiting.join(timeout=10)
    assert answers == [False, False]


def test_a_missing_file_is_named_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(BadBatchFile, match=r"missing\.csv\.zstd\.aes"):
        plan_batch({"replace": [str(tmp_path / "missing.csv.zstd.aes")]}, {}, FMT)
