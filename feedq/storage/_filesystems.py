"""From a URL to a filesystem client and a path, and from a store's failure to feedq's error.

``s3://`` is served by pyarrow's S3 client, built from the AWS chain:
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (an S3-compatible server),
``AWS_REGION`` / ``AWS_DEFAULT_REGION`` (else the bucket's region is asked
for), and the SDK's own credential chain (environment, credentials file,
``AWS_PROFILE``, instance roles). Its internal retries are off: feedq
retries, below decompression, within :attr:`StorageOptions.retry_budget_s`.
Other schemes pyarrow knows (``gs://``, ``hdfs://``, ``abfs://``, ...) go
through ``pyarrow.fs.FileSystem.from_uri``; anything else through fsspec
(the ``feedq[fsspec]`` extra), wrapped as a pyarrow filesystem. A
filesystem registered for a prefix (:func:`register_filesystem`) wins.

Clients are cached per process and per (scheme, authority), and forgotten
in a forked child: no client crosses a fork.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlsplit

from feedq.errors import (
    DataLossError,
    FeedqError,
    InvalidArgumentError,
    MissingExtraError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from feedq.storage import _url
from feedq.storage._options import count, options

T = TypeVar("T")

_PYARROW_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")


class Location(NamedTuple):
    """Where a URL lives: ``fs`` (a ``pyarrow.fs.FileSystem``) and the ``path`` in it."""

    fs: Any
    path: str
    #: The URL as shown in messages (credentials can not be in it: they are refused).
    url: str
    #: ``url`` == ``prefix + "/" + (path without fs_prefix)``: turns listed paths back into URLs.
    prefix: str
    fs_prefix: str


_lock = threading.Lock()
_registered: dict[str, Any] = {}  # "scheme://" or "scheme://authority" -> filesystem; guarded
_clients: dict[tuple[str, str], tuple[Any, str]] = {}  # (scheme, authority) -> (fs, fs_prefix)
_pid = os.getpid()
# Stops the backoff waits at interpreter exit, so that exit never waits for a retry budget.
stopping = threading.Event()


def _forget_clients() -> None:
    global _pid
    _clients.clear()
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_clients)


def register_filesystem(prefix: str, filesystem: Any) -> None:
    """Serve URLs starting with ``prefix`` from ``filesystem`` (``None`` unregisters).

    ``prefix`` is ``"scheme://"`` (every URL of the scheme) or
    ``"scheme://authority"`` (one bucket or host); the longest registered
    prefix wins. ``filesystem`` is a ``pyarrow.fs.FileSystem`` or an fsspec
    filesystem (wrapped with ``pyarrow.fs.FSSpecHandler``); it is given
    paths as ``authority/path`` (``s3://b/k`` -> ``b/k``), as pyarrow's S3 and
    GCS filesystems expect. Pass an explicitly configured client here
    (credentials, endpoint, retry policy of its own) instead of a URL with
    credentials in it.

    Raises:
        ValueError: ``prefix`` is not ``scheme://...``.
        TypeError: ``filesystem`` is not a filesystem.
    """
    if not _url.scheme_of(prefix):
        raise ValueError(f"prefix must start with scheme://, got {prefix!r}")
    _url.check_no_credentials(prefix)
    key = prefix.rstrip("/") if not prefix.endswith("://") else prefix
    with _lock:
        if filesystem is None:
            _registered.pop(key, None)
            return
        _registered[key] = _as_arrow_fs(filesystem)


def _as_arrow_fs(filesystem: Any) -> Any:
    import pyarrow.fs as pafs

    if isinstance(filesystem, pafs.FileSystem):
        return filesystem
    try:
        import fsspec
    except ImportError:
        fsspec = None
    if fsspec is not None and isinstance(filesystem, fsspec.AbstractFileSystem):
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise TypeError(f"not a pyarrow or fsspec filesystem: {type(filesystem).__name__}")


def resolve(name: bytes | str) -> Location:
    """The filesystem and path of a remote URL.

    Raises:
        InvalidArgumentError: credentials in the URL; a plain path (no scheme).
        MissingExtraError: a scheme only fsspec knows, without fsspec.
        NotFoundError: a scheme nothing knows.
    """
    url = os.fsdecode(name)
    if not _url.scheme_of(url):  # else split() reads a path's first letters as a bucket
        raise InvalidArgumentError(f"{url}: not a URL (scheme://...); a plain path is a local "
                                   "file: use file:// or the os / glob modules")
    _url.check_no_credentials(url)
    scheme, authority, path = _url.split(url)
    prefix = f"{url[: len(scheme)]}://{authority}"
    with _lock:
        if os.getpid() != _pid:
            _forget_clients()
        fs = _registered.get(f"{scheme}://{authority}")
        if fs is None:
            fs = _registered.get(f"{scheme}://")
        if fs is not None:
            return Location(fs, f"{authority}/{path}", url, prefix, f"{authority}/")
        query = urlsplit(url).query
        key = (scheme, authority if not query else f"{authority}?{query}")
        cached = _clients.get(key)
    if cached is None:
        cached = _client(scheme, authority, url, query)
        with _lock:
            cached = _clients.setdefault(key, cached)
    fs, fs_prefix = cached
    return Location(fs, fs_prefix + path, url, prefix, fs_prefix)


def _client(scheme: str, authority: str, url: str, query: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    shown = _url.redact(url)
    if scheme == "s3" and not query:
        return _s3_client(authority), f"{authority}/"
    if scheme in _PYARROW_SCHEMES:
        probe = f"{scheme}://{authority}/feedq-probe" + (f"?{query}" if query else "")
        try:
            fs, path = pafs.FileSystem.from_uri(probe)
        except (OSError, ValueError) as exc:
            raise map_error(exc, shown, "connecting to the store") from None
        return fs, path[: -len("feedq-probe")]
    try:
        import fsspec
    except ImportError:
        raise MissingExtraError(
            f"{shown}: the {scheme}:// scheme needs fsspec, which is not installed: "
            'pip install "feedq[fsspec]"', name="fsspec"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(f"{scheme}://{authority}/feedq-probe")
    except (ValueError, ImportError) as exc:
        raise NotFoundError(f"{shown}: no filesystem for {scheme}://: {exc}") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path[: -len("feedq-probe")]


def _s3_client(bucket: str) -> Any:
    import pyarrow.fs as pafs

    opts = options()
    kwargs: dict[str, Any] = {
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        "connect_timeout": opts.request_timeout_s,
        "request_timeout": opts.request_timeout_s,
    }
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parts.netloc
        kwargs["scheme"] = parts.scheme or "https"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region and not endpoint:
        try:
            region = pafs.resolve_s3_region(bucket)
        except (OSError, ValueError):
            region = None  # the SDK's own default; a wrong region fails on first use, named
    if region:
        kwargs["region"] = region
    return pafs.S3FileSystem(**kwargs)


# ----------------------------------------------------------------- errors
_NOT_FOUND = re.compile(r"no_?such_?(key|bucket)|\b404\b|not found|does not exist", re.I)
_DENIED = re.compile(
    r"access_?denied|\b403\b|forbidden|invalid_?access_?key|signature_?does_?not_?match"
    r"|permission denied|unauthori[sz]ed|\b401\b", re.I)
# S3 answers 503 (SlowDown, or SERVICE_UNAVAILABLE when the SDK reads no body) to mean "slower".
_THROTTLED = re.compile(r"slow_?down|throttl|reduce your request rate|too many requests|\b429\b"
                        r"|\b503\b|service_?unavailable", re.I)
_TRANSIENT = re.compile(
    r"\b50[0-4]\b|internal_?error|network_?connection|curl ?code"
    r"|connection (reset|refused|aborted|closed)|timed? ?out|timeout|broken pipe|partial"
    r"|unexpected eof|end of (file|stream)|reset by peer|request_?time_?too_?skewed", re.I)


# The store could not be reached at all: refused, or the name did not resolve
# (curl codes 6 and 7). Transient once the store has answered in this process.
_UNREACHABLE = re.compile(
    r"connection refused|could ?n[o']?t connect|failed to connect|could not resolve|"
    r"name or service not known|curl ?code: ?[67]\b", re.I)
_answered: set[str] = set()  # stores (scheme://netloc) that answered a request in this process
# Stores whose last request spent its whole budget, failing, with no success
# since: a further request gets connect_budget_s only (a dead store fails each
# remaining file in seconds, not a full budget per file one after another).
_down: set[str] = set()


def _store_key(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}" if sep else url


def _message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(var)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def classify(exc: BaseException) -> str:
    """``"not_found"``, ``"denied"``, ``"throttled"``, ``"transient"`` or ``"fatal"``."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return "not_found"
    if isinstance(exc, PermissionError):
        return "denied"
    text = str(exc)
    if _DENIED.search(text):
        return "denied"
    if _THROTTLED.search(text):
        return "throttled"
    if isinstance(exc, (ConnectionError, TimeoutError)) or _TRANSIENT.search(text):
        return "transient"
    if _NOT_FOUND.search(text):
        return "not_found"
    return "fatal"


def map_error(exc: BaseException, url: str, action: str, offset: int | None = None) -> FeedqError:
    """The feedq error for a store's failure (no retry here)."""
    kind = classify(exc)
    msg = _message(exc)
    if kind == "not_found":
        return NotFoundError(f"{url}; No such file or directory ({action}: {msg})")
    if kind == "denied":
        return PermissionDeniedError(f"{url}: permission denied ({action}: {msg})")
    where = "" if offset is None else f" at offset {offset}"
    if isinstance(exc, ValueError):
        return InvalidArgumentError(f"{url}: {action} failed{where}: {msg}")
    if offset is not None:
        return DataLossError(f"{url}: {action} failed{where}: {msg}")
    if kind in ("throttled", "transient"):
        return UnavailableError(f"{url}: {action} failed: {msg}")
    return DataLossError(f"{url}: {action} failed: {msg}")


def retrying(
    fn: Callable[[], T],
    url: str,
    action: str,
    *,
    offset: Callable[[], int] | int | None = None,
    on_throttle: Callable[[], None] | None = None,
    closed: threading.Event | None = None,
    wake: threading.Event | None = None,
) -> T:
    """``fn()``, repeated after transient failures with jittered exponential
    backoff until :attr:`StorageOptions.retry_budget_s` has passed since the
    first failure; not-found and permission errors are raised at once.

    Raises:
        NotFoundError, PermissionDeniedError: at once.
        DataLossError: a read (``offset`` given) failed past its budget,
            naming the URL, the offset and the attempts.
        UnavailableError: another request failed past its budget.

    ``closed`` set ends the retries (a failure); ``wake`` set only ends a
    backoff wait at once, for an ``fn`` that then raises on its own (a file
    opened ahead that was dropped: its failures are retries, not failures).
    """
    opts = options()
    rng = random.Random()  # jitter only: no result depends on it
    first: float | None = None
    attempt = 0
    store = _store_key(url)
    while True:
        count(requests=1)
        try:
            result = fn()
        except (OSError, ValueError) as exc:
            kind = classify(exc)
            if kind not in ("throttled", "transient"):
                at = offset() if callable(offset) else offset
                raise map_error(exc, url, action, at) from None
            now = time.monotonic()
            if first is None:
                first = now
            if kind == "throttled":
                count(throttled=1)
                if on_throttle is not None:
                    on_throttle()
            elapsed = now - first
            stop = stopping.is_set() or (closed is not None and closed.is_set())
            budget, which = opts.retry_budget_s, "retry budget"
            if (opts.connect_budget_s < budget and store not in _answered
                    and _UNREACHABLE.search(str(exc))):
                budget, which = opts.connect_budget_s, "connect budget"
            elif opts.connect_budget_s < budget and store in _down:
                budget, which = opts.connect_budget_s, "store down: connect budget"
            if elapsed >= budget or stop:
                count(failures=1)
                if not stop:
                    _down.add(store)
                at = offset() if callable(offset) else offset
                where = "" if at is None else f" at offset {at}"
                never = (f"; {store} has not answered once in this process: check the endpoint "
                         "(AWS_ENDPOINT_URL, endpoint_override) and the network"
                         if store not in _answered else "")
                text = (f"{url}: {action} failed{where} after {attempt + 1} attempts in "
                        f"{elapsed:.1f} s ({which} {budget:g} s): "
                        f"{_message(exc)}{never}")
                if at is None:
                    raise UnavailableError(text) from None
                raise DataLossError(text) from None
            cap = min(opts.backoff_max_s, opts.backoff_initial_s * (2.0 ** min(attempt, 30)))
            delay = min(rng.uniform(0.0, cap), max(0.0, budget - elapsed))
            if wake is not None and not stopping.is_set():
                wake.wait(delay)
            else:
                (closed or stopping).wait(delay)
            attempt += 1
            count(retries=1)
            continue
        if store not in _answered:
            _answered.add(store)  # set.add is atomic; a race only adds it twice
        _down.discard(store)
        return result
