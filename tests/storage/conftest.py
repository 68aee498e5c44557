"""A real S3 server on loopback (moto), a bucket per test, and the fault proxy.

The server starts once per session on 127.0.0.1 (an ephemeral port); each
test gets its own bucket, the AWS environment pointing at the server (set
with monkeypatch, so nothing leaks) and small read-ahead blocks, so that
the test files span several range requests.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.storage.faults import FaultProxy

#: The secret the tests' AWS environment holds: it must never appear in an
#: error, a statistic or a saved state.
SECRET = "feedq-SECRET-never-shown-0123456789"
KEY_ID = "FEEDQTESTKEYID000001"

_buckets = itertools.count()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[tuple[str, int]]:
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield host, port
    server.stop()


@dataclasses.dataclass
class Bucket:
    name: str
    client: Any

    def url(self, key: str) -> str:
        return f"s3://{self.name}/{key}"

    def put(self, key: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)
        return self.url(key)


def _forget_clients() -> None:
    from feedq.storage import _filesystems

    with _filesystems._lock:
        _filesystems._clients.clear()


@pytest.fixture
def s3(moto_endpoint: tuple[str, int], monkeypatch: pytest.MonkeyPatch) -> Iterator[Bucket]:
    import boto3

    import feedq.storage as storage
    from feedq.storage import _filesystems

    # A store another test drove past its budget is not down for this one.
    monkeypatch.setattr(_filesystems, "_down", set())
    host, port = moto_endpoint
    endpoint = f"http://{host}:{port}"
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    name = f"feedq-test-{next(_buckets)}"
    client.create_bucket(Bucket=name)
    old = storage.configure(block_bytes=64 << 10, read_ahead=3, retry_budget_s=3.0,
                            backoff_initial_s=0.005, backoff_max_s=0.05, request_timeout_s=5.0)
    _forget_clients()
    storage.reset_statistics()
    try:
        yield Bucket(name, client)
    finally:
        storage.configure(**dataclasses.asdict(old))
        _forget_clients()


@pytest.fixture
def proxy(s3: Bucket, moto_endpoint: tuple[str, int],
          monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy in front of the server; feedq's S3 client goes through it."""
    p = FaultProxy(moto_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", p.endpoint)
    _forget_clients()
    try:
        yield p
    finally:
        p.close()
        _forget_clients()
