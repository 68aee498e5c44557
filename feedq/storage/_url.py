"""URLs: which names are remote, how they split, and how they are shown.

A name with a scheme (``s3://bucket/key``) other than ``file://`` is remote;
anything else -- a plain path, ``file:///path`` -- is local and stays on the
readers' local code path. URLs that carry credentials (``user:secret@`` or
a secret in the query) are refused: a URL is a work unit, so it lands in
saved state, statistics and error messages, where a credential must never
be. Credentials come from each store's standard chain (environment,
credentials files, profiles) or an explicitly registered filesystem.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

from feedq.errors import InvalidArgumentError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")

# Query keys whose values are secrets in the URIs pyarrow and fsspec accept.
_SECRET_KEYS = ("secret", "token", "password", "passwd", "credential", "signature", "sig",
                "access_key", "key")


def scheme_of(name: str) -> str:
    """The lower-case scheme of ``name`` (``"s3"``), ``""`` for a plain path."""
    m = _SCHEME.match(name)
    return m.group(1).lower() if m else ""


def is_remote(name: bytes | str) -> bool:
    """True when ``name`` is a URL of a store (any scheme but ``file://``)."""
    text = os.fsdecode(name)
    return scheme_of(text) not in ("", "file")


def local_path(name: bytes | str) -> str:
    """The local path of a plain path or a ``file://`` URL."""
    text = os.fsdecode(name)
    if scheme_of(text) == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgumentError(f"{text}: a file:// URL names a path on this machine")
        return parts.path
    return text


def split(url: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a URL: ``s3://b/k/x`` -> ``("s3", "b", "k/x")``."""
    scheme = scheme_of(url)
    rest = url[len(scheme) + 3 :]
    rest = rest.split("?", 1)[0]
    authority, _, path = rest.partition("/")
    return scheme, authority, path


def _secret_userinfo(netloc: str) -> bool:
    # ``key:secret@bucket`` carries a secret; ``container@account`` (abfs://) does not.
    return "@" in netloc and ":" in netloc.rsplit("@", 1)[0]


def check_no_credentials(url: str) -> None:
    """Refuse a URL that carries a credential.

    Raises:
        InvalidArgumentError: userinfo with a secret (``user:secret@``) or a secret-looking
            query parameter; the message shows the URL with them masked.
    """
    parts = urlsplit(url)
    bad = _secret_userinfo(parts.netloc)
    if parts.query:
        for key, _ in parse_qsl(parts.query, keep_blank_values=True):
            if any(s in key.lower() for s in _SECRET_KEYS):
                bad = True
    if bad:
        raise InvalidArgumentError(
            f"{redact(url)}: credentials in a URL are refused (a URL is saved in states, "
            "statistics and messages); use the store's standard credential chain "
            "(for S3 the AWS environment variables, credentials file or AWS_PROFILE) "
            "or feedq.storage.register_filesystem"
        )


def redact(url: str) -> str:
    """``url`` with userinfo and secret-looking query values replaced by ``***``."""
    if not scheme_of(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if _secret_userinfo(netloc):
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        shown = []
        for key, value in parse_qsl(query, keep_blank_values=True):
            secret = any(s in key.lower() for s in _SECRET_KEYS)
            shown.append(f"{key}={'***' if secret else value}")
        query = "&".join(shown)
    out = f"{parts.scheme}://{netloc}{parts.path}"
    return f"{out}?{query}" if query else out
