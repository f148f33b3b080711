"""S3 storage: pyarrow's S3FileSystem for data files, boto3 for conditional puts, listing and server-side copies.

The only module that imports boto3. botocore failures are translated into
StorageError messages naming the bucket and the cause (never the credentials).

Transient failures (connection refused or reset, timeouts, 5xx, throttling) are retried with exponential backoff by
both clients (botocore's standard retry mode, the AWS SDK's standard strategy in pyarrow), up to
RECORDS_DESTINATION_S3_RETRY_ATTEMPTS attempts per call (read once by destination.runtime.settings, carried by
StorageSpec into Spark tasks); when those are spent they become StorageUnavailable (gRPC
UNAVAILABLE, retried by Fivetran). Only what a user must fix (credentials, bucket, permissions) is a StorageError.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlparse

import boto3
import botocore.config
import botocore.exceptions
import botocore.utils
import pyarrow as pa
import pyarrow.fs as pafs

from destination.runtime.arrow_memory import arrow_owned
from destination.runtime.errors import DestinationError, StorageError, StorageUnavailable, scrub
from destination.storage.base import ObjectInfo, Storage, StorageSpec, reason

T = TypeVar("T")
# a response's body broken off while it was read (botocore's retries cover the request, not reading its body)
_BODY_BROKEN = (botocore.exceptions.IncompleteReadError, botocore.exceptions.ResponseStreamingError)
WHOLE_READ_BYTES = 8 << 20  # a data file up to this size (a small sync's) is read in one request
_HINTS = {
    "NoSuchBucket": "the bucket does not exist; create it or fix `root`",
    "InvalidAccessKeyId": "the access key id is not known to the S3 service; check `aws_access_key_id`",
    "SignatureDoesNotMatch": "the secret access key is wrong; check `aws_secret_access_key`",
    "AccessDenied": "the credentials are not allowed to use this bucket/prefix; check the IAM policy",
    "403": "access denied; check the credentials and the bucket policy",
    "404": "not found; check the bucket name in `root`",
}
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestThrottled", "RequestTimeout",
                    "InternalError", "ServiceUnavailable"}
# pyarrow's S3 errors, as text (they reach the driver inside Spark's Java exceptions): the AWS SDK's retryable kinds
_ARROW_TRANSIENT = re.compile(r"AWS Error (NETWORK_CONNECTION|SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|"
                              r"THROTTLING|REQUEST_TIMEOUT)\b")


def retry_attempts(spec: StorageSpec) -> int:
    """Attempts per S3 call (StorageSpec.s3_retry_attempts: RECORDS_DESTINATION_S3_RETRY_ATTEMPTS, at least 1);
    botocore waits a random 0..2^n s (at most 20 s) before retry n."""
    return max(1, spec.s3_retry_attempts)


def is_transient_arrow_error(text: str) -> bool:
    """True for pyarrow S3 failure text that retrying later can cure (network, throttling, 5xx)."""
    return _ARROW_TRANSIENT.search(text) is not None


def transient_error(exc: BaseException) -> StorageUnavailable | None:
    """pyarrow's S3 failure (an OSError) that outlasted its retries and that retrying later can cure, as
    StorageUnavailable; None for anything else. Spark tasks return it as a value (spark_jobs.boundary), the
    driver's RPC layer uses it for pyarrow calls of its own: both answer gRPC UNAVAILABLE."""
    if isinstance(exc, OSError) and not isinstance(exc, DestinationError) and is_transient_arrow_error(str(exc)):
        return StorageUnavailable(f"object storage stayed unreachable through the retries: {scrub(str(exc))}")
    return None


def _is_transient_client_error(exc: botocore.exceptions.ClientError) -> bool:
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return status >= 500 or str(exc.response.get("Error", {}).get("Code", "")) in _TRANSIENT_CODES


def _bad_endpoint(endpoint: str) -> StorageError:
    return StorageError(f"s3_endpoint {endpoint!r} is not a valid endpoint URL: expected http://host:port or "
                        "https://host[:port]")


def endpoint_url(endpoint: str) -> str | None:
    """The endpoint as a URL, None for AWS; checked before any credential is used. One without a scheme is refused
    rather than guessed: whether the store speaks http or https is the user's to say."""
    if not endpoint:
        return None
    if "://" not in endpoint:
        raise StorageError(f"s3_endpoint {endpoint!r} names no scheme: write http://{endpoint} or "
                           f"https://{endpoint}")
    url = endpoint
    parsed = urlparse(url)
    try:
        _ = parsed.port  # raises on a port that is not a number in range
    except ValueError:
        raise _bad_endpoint(endpoint) from None
    # botocore's own host check, which otherwise fails later with a bare "ValueError: Invalid endpoint"
    valid_host = botocore.utils.is_valid_endpoint_url(url) or botocore.utils.is_valid_ipv6_endpoint_url(url)
    if parsed.scheme not in ("http", "https") or not valid_host:
        raise _bad_endpoint(endpoint)
    return url


class S3Storage(Storage):
    def __init__(self, spec: StorageSpec) -> None:
        self.spec = spec
        parsed = urlparse(spec.root)
        self.bucket = parsed.netloc
        if not self.bucket:
            raise StorageError(f"root {spec.root!r} names no bucket (expected s3://bucket/prefix)")
        self.prefix = parsed.path.strip("/")
        endpoint = endpoint_url(spec.s3_endpoint)
        self._endpoint = endpoint
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            region_name=spec.s3_region or "us-east-1",
            aws_access_key_id=spec.access_key_id or None,
            aws_secret_access_key=spec.secret_access_key or None,
            config=botocore.config.Config(
                retries={"total_max_attempts": retry_attempts(spec), "mode": "standard"},
                connect_timeout=5, read_timeout=60,
                s3={"addressing_style": "path"} if endpoint else None,
            ),
        )
        self._fs: pafs.S3FileSystem | None = None

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("S3Storage is not picklable; ship its StorageSpec and call open_storage()")

    def library_error(self, action: str, path: str, exc: OSError) -> DestinationError:
        """pyarrow's S3 failure that outlasted its retries and that retrying later can cure is StorageUnavailable
        (gRPC UNAVAILABLE; a Spark task returns it as a value); any other is the contract's StorageError."""
        if is_transient_arrow_error(str(exc)):
            return StorageUnavailable(f"{action} of {self.url(path)} failed: object storage stayed unreachable "
                                      f"through the retries: {reason(exc)}")
        return super().library_error(action, path, exc)

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def _error(self, what: str, exc: Exception) -> DestinationError:
        """Translate a botocore failure (after botocore's retries) into StorageUnavailable when it is transient,
        else a StorageError naming the bucket and the cause."""
        attempts = f"after {retry_attempts(self.spec)} attempts"
        if isinstance(exc, botocore.exceptions.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            hint = _HINTS.get(code) or exc.response.get("Error", {}).get("Message", "") or code
            if _is_transient_client_error(exc):
                return StorageUnavailable(f"S3 {what} in bucket {self.bucket!r} failed {attempts}: {code}: {hint}")
            return StorageError(f"S3 {what} in bucket {self.bucket!r} failed: {code}: {hint}")
        if isinstance(exc, botocore.exceptions.SSLError):
            return StorageError(f"S3 endpoint {self._endpoint} failed the TLS handshake ({what}): the endpoint does "
                                "not speak HTTPS (use http://) or its certificate is not trusted; check `s3_endpoint`")
        if isinstance(exc, (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError, *_BODY_BROKEN)):
            return StorageUnavailable(f"S3 endpoint {self._endpoint or 'AWS'} did not answer {attempts} ({what}): "
                                      f"{type(exc).__name__}; if this persists, check `s3_endpoint`")
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            return StorageError("no S3 credentials: set `aws_access_key_id` and `aws_secret_access_key`")
        return StorageError(f"S3 {what} in bucket {self.bucket!r} failed: {type(exc).__name__}: {exc}")

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._error(what, exc) from None

    @staticmethod
    def _is_missing(exc: botocore.exceptions.ClientError) -> bool:
        return str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound")

    def read_bytes(self, path: str) -> bytes:
        key = self._key(path)
        attempts = retry_attempts(self.spec)
        for attempt in range(1, attempts + 1):
            try:
                return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except botocore.exceptions.ClientError as exc:
                if self._is_missing(exc):
                    raise FileNotFoundError(path) from None
                raise self._error(f"read of {key!r}", exc) from None
            except _BODY_BROKEN as exc:  # botocore retries a request, not the reading of its body: the GET again
                if attempt == attempts:
                    raise self._error(f"read of {key!r}", exc) from None
            except botocore.exceptions.BotoCoreError as exc:
                raise self._error(f"read of {key!r}", exc) from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    @contextmanager
    def open_input(self, path: str, size: int | None = None) -> Iterator[pa.NativeFile]:
        """A small object of known size is read whole with one GET: pyarrow's random-access file asks for its size
        (HEAD) and then reads a Parquet footer and its columns in ranges, three requests or more."""
        if size is None or size > WHOLE_READ_BYTES:
            with super().open_input(path) as source:
                yield source
            return
        yield pa.BufferReader(arrow_owned(self.read_bytes(path)))

    def write_bytes(self, path: str, data: bytes) -> None:
        key = self._key(path)
        self._call(f"write of {key!r}", lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=data))

    def create_exclusive(self, path: str, data: bytes) -> bool:
        key = self._key(path)
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except botocore.exceptions.ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise self._error(f"conditional write of {key!r}", exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(f"conditional write of {key!r}", exc) from None

    def exists(self, path: str) -> bool:
        key = self._key(path)
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except botocore.exceptions.ClientError as exc:
            if self._is_missing(exc):
                return False
            raise self._error(f"lookup of {key!r}", exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(f"lookup of {key!r}", exc) from None

    def _pages(self, prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        start = self._key(prefix).rstrip("/") + "/" if prefix else (self.prefix + "/" if self.prefix else "")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": start}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(f"listing of {kwargs['Prefix']!r}", lambda: list(paginator.paginate(**kwargs)))
        yield from pages

    def list_children(self, prefix: str) -> list[str]:
        names: set[str] = set()
        for page in self._pages(prefix, "/"):
            base = page.get("Prefix", "")
            for cp in page.get("CommonPrefixes", []):
                if self._holds_objects(cp["Prefix"]):
                    names.add(cp["Prefix"][len(base):].rstrip("/"))
            for obj in page.get("Contents", []):
                names.add(obj["Key"][len(base):])
        return sorted(n for n in names if n)

    def _holds_objects(self, key_prefix: str) -> bool:
        """S3-compatible stores with a filer (SeaweedFS) keep emptied 'folders' listed; AWS does not."""
        found = self._call(f"listing of {key_prefix!r}", lambda: self.client.list_objects_v2(
            Bucket=self.bucket, Prefix=key_prefix, MaxKeys=1))
        return int(found.get("KeyCount", 0)) > 0

    @contextmanager
    def probing_root(self) -> Iterator[None]:
        """S3-compatible stores with a filer (SeaweedFS) create a 'folder' for each level of the root's prefix when an
        object is written below it, and keep it once the object is deleted: the levels not listed before the probe
        are deleted after it (a store without folders, AWS, has nothing to delete; a level that still holds an
        object is not deleted by any store)."""
        parts = self.prefix.split("/") if self.prefix else []
        levels = ["/".join(parts[:n]) + "/" for n in range(1, len(parts) + 1)]
        listed = {level for level in levels if self._level_listed(level)}
        try:
            yield
        finally:
            for level in reversed(levels):
                if level not in listed:
                    self._call(f"delete of {level!r}", partial(self.client.delete_object, Bucket=self.bucket, Key=level))

    def _level_listed(self, level: str) -> bool:
        """Whether a listing of its parent shows `level` (a key ending in `/`): as a folder or a folder marker."""
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(f"listing of {level!r}", lambda: list(paginator.paginate(
            Bucket=self.bucket, Prefix=level.rstrip("/"), Delimiter="/")))
        return any(level in {p["Prefix"] for p in page.get("CommonPrefixes", [])}
                   | {o["Key"] for o in page.get("Contents", [])} for page in pages)

    def list_recursive(self, prefix: str) -> Iterator[ObjectInfo]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        for page in self._pages(prefix, None):
            for obj in page.get("Contents", []):
                yield ObjectInfo(obj["Key"][strip:], int(obj["Size"]), obj["LastModified"].timestamp())

    def list_starting_with(self, path: str) -> list[str]:
        key = self._key(path)
        strip = len(self.prefix) + 1 if self.prefix else 0
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(f"listing of {key!r}", lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=key)))
        return sorted(obj["Key"][strip:] for page in pages for obj in page.get("Contents", []))

    def delete(self, path: str) -> None:
        key = self._key(path)
        self._call(f"delete of {key!r}", lambda: self.client.delete_object(Bucket=self.bucket, Key=key))

    def delete_prefix(self, prefix: str) -> None:
        keys = [self._key(o.path) for o in self.list_recursive(prefix)]
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i:i + 1000]]
            self._call("bulk delete", partial(self.client.delete_objects, Bucket=self.bucket,
                                              Delete={"Objects": chunk, "Quiet": True}))

    def copy(self, src: str, dst: str) -> None:
        s, d = self._key(src), self._key(dst)
        self._call(f"server-side copy of {s!r}", lambda: self.client.copy_object(
            Bucket=self.bucket, Key=d, CopySource={"Bucket": self.bucket, "Key": s}))

    def size(self, path: str) -> int:
        key = self._key(path)
        head = self._call(f"lookup of {key!r}", lambda: self.client.head_object(Bucket=self.bucket, Key=key))
        return int(head["ContentLength"])

    def url(self, path: str) -> str:
        return f"s3://{self.bucket}/{self._key(path)}"

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        if self._fs is None:
            endpoint = self._endpoint
            # delayed open: a file smaller than one part goes up as one PUT when it closes (a small sync's data
            # file), not as a multipart upload's three requests; an open's error surfaces at the first write or close
            kwargs: dict[str, Any] = {"region": self.spec.s3_region or "us-east-1", "allow_delayed_open": True,
                                      "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=retry_attempts(self.spec))}
            if self.spec.access_key_id:
                kwargs["access_key"] = self.spec.access_key_id
                kwargs["secret_key"] = self.spec.secret_access_key
            if endpoint:
                parsed = urlparse(endpoint)
                kwargs["endpoint_override"] = parsed.netloc
                kwargs["scheme"] = parsed.scheme or "http"
            self._fs = pafs.S3FileSystem(**kwargs)
        return self._fs

    def arrow_path(self, path: str) -> str:
        return f"{self.bucket}/{self._key(path)}"
