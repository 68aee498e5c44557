"""Where datasets live: URLs and filesystems, read-ahead, retries.

Every reader, producer glob and writer of feedq accepts a URL where it
accepts a file name: ``s3://bucket/key`` (pyarrow's S3 client, configured
by the AWS chain), ``gs://``, ``hdfs://``, ``abfs://`` (pyarrow's clients),
any other scheme fsspec knows (the ``feedq[fsspec]`` extra), and
``file://`` or plain paths, which stay on the local code path unchanged.
A remote object is read with several range requests in flight
(:class:`StorageOptions`) and retried on transient failures below
decompression, so no record is lost or delivered twice. See docs/storage.md.
"""

from __future__ import annotations

import atexit

from feedq.storage._filesystems import Location, register_filesystem, resolve
from feedq.storage._filesystems import stopping as _stopping
from feedq.storage._listing import exists, glob, open_output, size_of
from feedq.storage._options import (
    StorageOptions,
    configure,
    options,
    reset_statistics,
    statistics,
)
from feedq.storage._prefetch import Hints
from feedq.storage._remote import RandomAccess, RemoteFile, open_remote
from feedq.storage._url import check_no_credentials, is_remote, local_path, redact

__all__ = [
    "Hints",
    "Location",
    "RandomAccess",
    "RemoteFile",
    "StorageOptions",
    "check_no_credentials",
    "configure",
    "exists",
    "glob",
    "is_remote",
    "local_path",
    "open_output",
    "open_remote",
    "options",
    "redact",
    "register_filesystem",
    "reset_statistics",
    "resolve",
    "size_of",
    "statistics",
]

# At exit, waits between retries end at once (a request in flight ends by its timeout).
atexit.register(_stopping.set)

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("feedq.storage."):
        _obj.__module__ = __name__
