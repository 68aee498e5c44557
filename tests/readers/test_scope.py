"""Readers in closing scopes, their threads' names, and the package's layering
(project issues 10 and 11).

* A reader created inside ``with feedq.Pipeline()`` -- any closing scope of
  ``feedq._core.scope`` -- registers itself so that the pipeline closes it.
* Every thread a reader starts is named ``feedq-...``.
* ``feedq.readers`` imports no other package's private modules, and exports
  the TFRecord checksum for feedq's own packages (``feedq.cli.datasets``)
  without listing it in ``__all__``.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import os
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

import feedq.readers
from feedq._core import scope as _scope
from feedq.queues import FIFOQueue
from feedq.readers import (
    FixedLengthRecordReader,
    ParquetReader,
    TextLineReader,
    TFRecordReader,
    TFRecordWriter,
    WholeFileReader,
)

pytestmark = pytest.mark.timeout(30)

READERS_DIR = Path(feedq.readers.__file__).parent


def closed_queue(*names: str | Path) -> FIFOQueue:
    q = FIFOQueue(capacity=-1, dtypes=["string"], shapes=[[]])
    q.enqueue_many([[str(n) for n in names]])
    q.close()
    return q


def _lines(nbytes: int) -> bytes:
    """About ``nbytes`` of random text, in lines of 81 bytes."""
    h = os.urandom(nbytes // 2).hex().encode()
    return b"".join(h[i : i + 80] + b"\n" for i in range(0, len(h), 80))


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


MAKERS = {
    "text": lambda: TextLineReader(),
    "tfrecord": lambda: TFRecordReader(),
    "fixed": lambda: FixedLengthRecordReader(4),
    "whole": lambda: WholeFileReader(),
    "parquet": lambda: ParquetReader(),
}


# ------------------------------------------------------------ closing scopes


def test_readers_created_in_a_closing_scope_register_to_be_closed() -> None:
    with _scope.closing_scope() as taken:
        readers = [make() for make in MAKERS.values()]
    assert taken == readers  # in creation order; the owner closes them in reverse
    outside = TextLineReader()
    assert outside not in taken
    outside.close()
    for r in reversed(taken):
        r.close()


def test_the_innermost_scope_takes_the_reader() -> None:
    with _scope.closing_scope() as outer:
        a = TextLineReader()
        with _scope.closing_scope() as inner:
            b = TFRecordReader()
        c = WholeFileReader()
    assert outer == [a, c] and inner == [b]


def test_closing_what_the_scope_took_ends_the_read_ahead_thread(tmp_path: Path) -> None:
    p = tmp_path / "big.txt.gz"
    p.write_bytes(gzip.compress(_lines(3 << 20), 1))
    before = set(threading.enumerate())
    with _scope.closing_scope() as taken:
        reader = TextLineReader(compression="GZIP", block_bytes=1 << 16)
        reader.read(closed_queue(p))
        assert [t.name for t in new_threads(before)] == [f"feedq-inflate:{p.name}"]
    for r in reversed(taken):  # what a Pipeline does after joining its threads
        r.close()
    assert new_threads(before) == []
    assert reader in taken


def test_a_reader_whose_constructor_fails_closes_cleanly() -> None:
    with _scope.closing_scope() as taken:
        with pytest.raises(ValueError):
            TextLineReader(skip_header_lines=-1)
        with pytest.raises(ValueError):
            ParquetReader(on_error="ignore")  # type: ignore[arg-type]
    assert len(taken) == 1  # the TextLineReader: registered before its own check failed
    for r in taken:
        r.close()  # works on the half-built reader


# -------------------------------------------------------------- thread names


def _compressed_files(tmp_path: Path) -> list[tuple[str, Any, Path]]:
    big = os.urandom(3 << 20)
    out = []
    for comp, pack in (("GZIP", lambda b: gzip.compress(b, 1)), ("ZLIB", lambda b: zlib.compress(b, 1))):
        t = tmp_path / f"t-{comp}.tfrecord"
        with TFRecordWriter(t, comp) as w:
            w.write_many([big[i : i + 1000] for i in range(0, len(big), 1000)])
        out.append((comp, lambda c=comp: TFRecordReader(options=c, block_bytes=1 << 16), t))
        f = tmp_path / f"f-{comp}.bin"
        f.write_bytes(pack(big))
        out.append((comp, lambda c=comp: FixedLengthRecordReader(4, encoding=c, block_bytes=1 << 16), f))
        x = tmp_path / f"x-{comp}.txt"
        x.write_bytes(pack(_lines(3 << 20)))
        out.append((comp, lambda c=comp: TextLineReader(compression=c, block_bytes=1 << 16), x))
    try:
        import zstandard
    except ImportError:
        return out
    z = tmp_path / "t-ZSTD.tfrecord"
    with TFRecordWriter(z, "ZSTD") as w:
        w.write_many([big[i : i + 1000] for i in range(0, len(big), 1000)])
    out.append(("ZSTD", lambda: TFRecordReader(options="ZSTD", block_bytes=1 << 16), z))
    zz = tmp_path / "x-ZSTD.txt"
    zz.write_bytes(zstandard.ZstdCompressor().compress(_lines(3 << 20)))
    out.append(("ZSTD", lambda: TextLineReader(compression="ZSTD", block_bytes=1 << 16), zz))
    return out


def test_every_thread_a_reader_starts_is_named_feedq(tmp_path: Path) -> None:
    files = _compressed_files(tmp_path)
    before = set(threading.enumerate())
    readers = []
    for _comp, make, path in files:
        r = make()
        r.read(closed_queue(path))  # mid-file: its read-ahead thread is running
        readers.append(r)
    started = new_threads(before)
    assert len(started) == len(files)  # one read-ahead thread per compressed file
    assert all(t.name.startswith("feedq-") for t in started), [t.name for t in started]
    assert all(t.daemon for t in started)
    for r in readers:
        r.close()
    assert new_threads(before) == []


# ------------------------------------------------------------------ layering


# Common lower modules (below every package) and the native core, which
# imports nothing from feedq (DESIGN: feedq/_native sits at the bottom).
# feedq._core.positions (how readers report positions for resumption) and
# feedq._core.extras (optional packages loaded late) too; and feedq.storage
# (public: URLs, read-ahead, retries), the layer readers read remote bytes through.
ALLOWED = {"feedq.errors", "feedq.queues", "feedq._core.timeouts", "feedq._core.scope", "feedq._native",
           "feedq._core.positions", "feedq._core.extras", "feedq.storage"}


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _feedq_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside feedq.readers
                base = "feedq.readers" if node.level == 1 else "feedq"
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            for a in node.names:
                # `from feedq._core import scope` imports the module feedq._core.scope.
                sub = f"{mod}.{a.name}"
                names.append(sub if mod.startswith("feedq") and _is_module(sub) else mod)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return [n for n in names if n == "feedq" or n.startswith("feedq.")]


def test_readers_import_no_private_module_of_another_package() -> None:
    bad = {}
    for path in sorted(READERS_DIR.glob("*.py")):
        for mod in _feedq_imports(path):
            if mod.startswith("feedq.readers") or mod in ALLOWED:
                continue
            bad.setdefault(path.name, []).append(mod)
    assert bad == {}


def test_masked_crc32c_is_exported() -> None:
    from feedq._native import masked_crc32c as native
    from feedq.readers import masked_crc32c

    assert masked_crc32c is native  # one CRC32C: the native core's (or its twin)
    assert masked_crc32c(b"") == 0xA282EAD8  # TFRecord's masked CRC32C of nothing
    # Public within feedq (the CLI's data writer uses it) and so listed in
    # __all__, like every public name (tests/test_public_api.py).
    assert "masked_crc32c" in feedq.readers.__all__
