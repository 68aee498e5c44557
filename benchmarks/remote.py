"""Reading from an object store: the loopback S3 server with 0, 20 and 50 ms
of injected round-trip latency, beside the same files on local disk and the
server's own ceiling, all in the same run.

Data: ``feedq make-data --layout realistic`` sets -- TFRecord Examples
{ids: 0-20 int64, label, tag, x: 32 floats} of varying length, the same
GZIP-compressed, and CSV with fields of varying widths -- uploaded to a
moto S3 server on 127.0.0.1. The store is reached through the fault proxy
of the tests (tests/storage/faults.py), which delays every answer by the
latency of the row; server and proxies run in a process of their own (in
the benchmark's they would share its GIL).

Systems, one round running each once, rounds interleaved, medians reported:

* local: ``string_input_producer`` -> ``--readers`` reader threads, each
  ``read_block(4096)`` and a decode call (``parse_example`` of label and
  x[32] / ``decode_csv``) -> ``batch_join(256)`` -> a loop counting records;
* s3 +N ms: the same pipeline over ``s3://`` URLs through the proxy;
* ceiling +N ms: a bare parallel range-GET loop (pyarrow's S3 client,
  ``--readers`` x read-ahead requests of one block in flight) fetching the
  same bytes through the same proxy, in records/s of the set: what the
  server, the proxy and the link give when nothing is decoded.

Also: time to the first batch (s3 +50 ms) and the peak bytes held by the
read-ahead of one open file (blocks fetched, not yet consumed) beside the
documented bound, ``(read_ahead + 1) * block_bytes``.

Usage::

    python benchmarks/remote.py                  # 400k records per set, 3 rounds
    python benchmarks/remote.py --quick          # 100k records, 3 rounds
    python benchmarks/remote.py --quick --files 64 --latencies 0.05 --compare-open-ahead
        # many small files at +50 ms, with and without opening the next files ahead
    python benchmarks/remote.py --quick --pin --trace
        # this process on CPU 0, the server + proxies on CPU 1; where the time goes

``--pin`` (Linux): the readers, the consumer, the local rows and the bare
ceiling loop run on CPU 0, the server and the proxies on CPU 1, so local
and remote rows decode on the same CPU and "x local" measures how well the
latency is hidden rather than how the decoder and the Python server share
the cores; the ceiling is then one CPU of server. Do not run it under
``nice`` (the other jobs of a shared machine would take the pinned CPUs).
``--trace`` prints, per s3 row, the range requests in flight (per open file
and by tenths of the run), their latency, the bytes/s the local rate would
need, where the readers waited (opens, first blocks, mid-file), and a
ceiling row straight to the server (no proxy).

"CPU s/s": CPU seconds per second of this process / of the server and
proxies process during the row (with ``--pin``, 1.00 is one CPU busy).

"blocking requests": requests a reader sent only when it needed their answer
(``storage.statistics()["blocking_requests"]``): the round trips on the
readers' path, per run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import feedq
import feedq.storage as storage
from benchmarks._util import header, table
from feedq.cli.datasets import make_dataset
from feedq.readers import (
    FixedLenFeature,
    TextLineReader,
    TFRecordReader,
    decode_csv,
    parse_example,
)
from feedq.storage import _filesystems, _remote

_SERVER = """
import json, logging, os, sys
if len(sys.argv) > 2:  # --pin: this process (server, proxies, all their threads) on these CPUs
    os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
from moto.server import ThreadedMotoServer
from tests.storage.faults import FaultProxy
logging.getLogger("werkzeug").setLevel(logging.WARNING)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
up = server.get_host_and_port()
ports = {"server": up[1]}
for lat in sys.argv[1].split(","):
    ports[str(float(lat))] = FaultProxy(up, latency=float(lat)).port
print(json.dumps(ports), flush=True)
sys.stdin.read()
server.stop()
"""

SETS = {
    "tfrecord": ("tfrecord", None),
    "gzip": ("tfrecord", "GZIP"),
    "csv": ("csv", None),
}
LATENCIES = (0.0, 0.020, 0.050)


def pin_process(cpus: set[int]) -> None:
    """Pin every thread of this process to ``cpus``; threads started later
    inherit it from the thread that starts them."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def parse_pin(spec: str) -> tuple[set[int], set[int]]:
    """``"0:1"`` -> ({0}, {1}): the benchmark's CPUs, the server's."""
    mine, _, theirs = spec.partition(":")
    a = {int(c) for c in mine.split(",")}
    b = {int(c) for c in theirs.split(",")}
    have = os.sched_getaffinity(0)
    if not a or not b or a & b or not (a | b) <= have:
        raise SystemExit(f"--pin {spec}: want two disjoint CPU sets from {sorted(have)}")
    return a, b


def decoder(kind: str) -> Callable[[Any], int]:
    if kind == "csv":
        defaults = [[0]] + [[0.0]] * 8 + [[0]]

        def dec_csv(block: Any) -> int:
            cols = decode_csv(block, record_defaults=defaults)
            return len(cols[0])
        return dec_csv
    feats = {"label": FixedLenFeature([], "int64"), "x": FixedLenFeature([32], "float32")}

    def dec_tf(block: Any) -> int:
        return len(parse_example(block, feats)["label"])
    return dec_tf


def run_pipeline(files: list[str], kind: str, compression: str | None, readers: int,
                 first: list[float] | None = None) -> float:
    """Records per second through the reader pipeline; ``first``: seconds to the first batch."""
    dec = decoder(kind)
    rs: list[Any] = [TextLineReader(skip_header_lines=1, compression=compression) if kind == "csv"
                     else TFRecordReader(options=compression) for _ in range(readers)]
    n = 0
    t0 = time.perf_counter()
    with feedq.Pipeline() as pipe:
        q = feedq.string_input_producer(files, num_epochs=1, shuffle=False)

        def read(r: Any) -> list[Any]:
            block = r.read_block(q, 4096)
            dec(block)
            return [block.values()]

        feedq.batch_join([lambda r=r: read(r) for r in rs], 256, capacity=4096, enqueue_many=True,
                         dtypes=[feedq.STRING], shapes=[[]], allow_smaller_final_batch=True)
        for b in pipe:
            if first is not None and n == 0:
                first.append(time.perf_counter() - t0)
            n += len(b)
    dt = time.perf_counter() - t0
    for r in rs:
        r.close()
    return n / dt


def run_ceiling(urls: list[str], readers: int, depth: int, block: int) -> float:
    """Bytes per second of bare range GETs, ``readers * depth`` in flight."""
    import pyarrow.fs as pafs

    loc = storage.resolve(urls[0])
    fs = loc.fs
    ranges: list[tuple[str, int, int]] = []
    for u in urls:
        path = storage.resolve(u).path
        size = fs.get_file_info(path).size
        ranges += [(path, off, min(block, size - off)) for off in range(0, size, block)]
    lock = threading.Lock()
    it = iter(ranges)
    total = [0]

    def work() -> None:
        handles: dict[str, Any] = {}
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                return
            path, off, n = item
            h = handles.get(path) or handles.setdefault(path, fs.open_input_file(path))
            data = h.read_at(n, off)
            with lock:
                total[0] += len(data)

    assert isinstance(fs, pafs.FileSystem)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(readers * depth)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total[0] / (time.perf_counter() - t0)


class CpuUse:
    """CPU seconds per wall second of this process and of the server's
    around a call: with ``--pin``, how busy each of the two CPUs was."""

    def __init__(self, server_pid: int) -> None:
        self._stat = f"/proc/{server_pid}/stat"
        self._tick = os.sysconf("SC_CLK_TCK")

    def _server(self) -> float:
        with open(self._stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime

    def __call__(self, out: dict[str, list[float]], key: str, fn: Callable[..., float],
                 *args: Any) -> float:
        w0, c0, s0 = time.perf_counter(), time.process_time(), self._server()
        rate = fn(*args)
        wall = time.perf_counter() - w0
        out.setdefault(f"cpu {key}", []).append((time.process_time() - c0) / wall)
        out.setdefault(f"srv {key}", []).append((self._server() - s0) / wall)
        return rate


def busy(res: dict[str, list[float]], key: str) -> str:
    """The median CPU s/s of this process and of the server in row ``key``."""
    return f"{statistics.median(res[f'cpu {key}']):.2f} / {statistics.median(res[f'srv {key}']):.2f}"


class PeakHeld:
    """The most bytes any one open remote file held ahead of its reader."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._files: list[Any] = []
        orig = _remote.RemoteFile.__init__
        files = self._files

        def init(rf: Any, *a: Any, **kw: Any) -> None:
            orig(rf, *a, **kw)
            files.append(rf)
        self._orig = orig
        _remote.RemoteFile.__init__ = init  # type: ignore[method-assign,assignment]
        self._t = threading.Thread(target=self._watch, daemon=True)
        self._t.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.002):
            for rf in list(self._files):
                held = len(rf._cur) + sum(
                    len(f.result()) for _, _, f in list(rf._ahead) if f.done() and not f.exception())
                self.peak = max(self.peak, held)
            self._files[:] = [f for f in self._files if not f.closed]

    def stop(self) -> None:
        self._stop.set()
        self._t.join()
        _remote.RemoteFile.__init__ = self._orig  # type: ignore[method-assign]


class Trace:
    """Where an s3 row's time goes (``--trace``): every range request's
    interval per open file, and every wait of a reader, split into waits at
    a file's start (its open, or its first block) and waits mid-file."""

    def __init__(self) -> None:
        self.fetches: list[tuple[int, float, float, int]] = []  # (file id, t0, t1, bytes)
        self.waits: dict[str, list[float]] = {"open": [], "first block": [], "mid-file": []}
        self._lock = threading.Lock()
        self._orig_fetch = _remote.RemoteFile._fetch
        self._orig_wait = vars(_remote)["wait"]
        orig_fetch, orig_wait, me = self._orig_fetch, self._orig_wait, self

        def fetch(rf: Any, start: int, length: int) -> bytes:
            t0 = time.perf_counter()
            data = orig_fetch(rf, start, length)
            with me._lock:
                me.fetches.append((id(rf), t0, time.perf_counter(), len(data)))
            return data

        def wait(fs: Any, *a: Any, **kw: Any) -> Any:
            caller = sys._getframe(1)
            t0 = time.perf_counter()
            out = orig_wait(fs, *a, **kw)
            dt = time.perf_counter() - t0
            kind = ("open" if caller.f_code.co_name == "open_remote"
                    else "first block" if caller.f_locals.get("start") == 0 else "mid-file")
            with me._lock:
                me.waits[kind].append(dt)
            return out
        _remote.RemoteFile._fetch = fetch  # type: ignore[method-assign,assignment]
        vars(_remote)["wait"] = wait
        self.t0 = time.perf_counter()

    def stop(self) -> float:
        self.t1 = time.perf_counter()
        _remote.RemoteFile._fetch = self._orig_fetch  # type: ignore[method-assign]
        vars(_remote)["wait"] = self._orig_wait
        return self.t1 - self.t0

    def summary(self, need_bytes_s: float) -> str:
        run = self.t1 - self.t0
        per_file: dict[int, list[tuple[float, float, int]]] = {}
        for f, a, b, n in self.fetches:
            per_file.setdefault(f, []).append((a, b, n))
        busy = sum(b - a for _, a, b, _ in self.fetches)
        # Per open file: requests in flight, time-weighted over the span from
        # its first request's start to its last one's end.
        depth = [sum(b - a for a, b, _ in v) / (max(b for _, b, _ in v) - min(a for a, _, _ in v))
                 for v in per_file.values()]
        lat = sorted(b - a for _, a, b, _ in self.fetches)
        got = sum(n for *_, n in self.fetches)
        w = {k: (len(v), sum(v)) for k, v in self.waits.items()}
        # Over time: each tenth of the run, requests in flight (time-weighted)
        # / files with a request in flight / MB/s arrived.
        start = min(a for _, a, _, _ in self.fetches)
        span = max(b for _, _, b, _ in self.fetches) - start
        tenths = []
        for i in range(10):
            lo, hi = start + span * i / 10, start + span * (i + 1) / 10
            infl = sum(max(0.0, min(b, hi) - max(a, lo)) for _, a, b, _ in self.fetches) / (hi - lo)
            files = len({f for f, a, b, _ in self.fetches if a < hi and b > lo})
            mb = sum(n for _, _, b, n in self.fetches if lo <= b < hi or (i == 9 and b == hi))
            tenths.append(f"{infl:.1f}/{files}/{mb / (hi - lo) / 1e6:.0f}")
        return (f"{len(per_file)} files, {len(self.fetches)} range requests of median "
                f"{statistics.median(lat) * 1e3:.0f} ms (p90 {lat[int(len(lat) * 0.9)] * 1e3:.0f} ms); "
                f"in flight: {busy / run:.1f} on average over the run, per open file "
                f"{statistics.median(depth):.1f} (median over files); "
                f"{got / run / 1e6:.0f} MB/s fetched, the local rate needs "
                f"{need_bytes_s / 1e6:.0f} MB/s; readers waited: "
                + ", ".join(f"{k} {c} x {t:.2f} s" for k, (c, t) in w.items())
                + f"; by tenths of the {span:.2f} s of fetching, requests in flight / files "
                "fetching / MB/s arrived: " + " ".join(tenths))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--block-mib", type=float, default=2.0,
                    help="read-ahead block (MiB); the default 8 MiB exceeds these small files")
    ap.add_argument("--read-ahead", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(SETS))
    ap.add_argument("--latencies", default=",".join(str(x) for x in LATENCIES),
                    help="injected round trips, seconds (comma-separated)")
    ap.add_argument("--prefetch-files", type=int, default=None,
                    help="files opened ahead per producer (default: StorageOptions' default)")
    ap.add_argument("--pin", nargs="?", const="0:1", default=None, metavar="MINE:SERVER",
                    help="pin this process (readers, consumer, local rows, ceiling loop) to "
                         "the CPUs before the colon and the server + proxies process to those "
                         "after it (default 0:1), so local and remote rows use the same reader "
                         "CPU; default: not pinned")
    ap.add_argument("--trace", action="store_true",
                    help="also print, per s3 row (last round), the range requests in flight per "
                         "open file, their latency, and where the readers waited")
    ap.add_argument("--compare-open-ahead", action="store_true",
                    help="also run each s3 row with prefetch_files=0 (no file opened ahead), "
                         "interleaved in the same rounds")
    args = ap.parse_args()
    if args.quick:
        args.records = 100_000
    pin = parse_pin(args.pin) if args.pin else None
    if pin is not None:
        pin_process(pin[0])
    import logging

    import boto3
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    header("benchmarks/remote.py: reading from a loopback S3 server vs local disk")
    block = int(args.block_mib * (1 << 20))
    storage.configure(block_bytes=block, read_ahead=args.read_ahead)
    if args.prefetch_files is not None:
        storage.configure(prefetch_files=args.prefetch_files)
    print(f"# {args.records:,} records per set in {args.files} files; {args.readers} readers; "
          f"read-ahead {args.read_ahead} x {block / (1 << 20):g} MiB per open file; "
          f"{storage.options().prefetch_files} files opened ahead; "
          f"{args.rounds} rounds; server and proxies in their own process")
    if pin is not None:
        print(f"# pinned: this process (readers, consumer, local rows, ceiling loop) on CPU "
              f"{','.join(map(str, sorted(pin[0])))}; the server + proxies process on CPU "
              f"{','.join(map(str, sorted(pin[1])))}")
    else:
        print("# not pinned: readers, server and proxies share all CPUs "
              f"({len(os.sched_getaffinity(0))})")
    # The server and the proxies run in another process: in this one they
    # would share the readers' GIL.
    latencies = tuple(float(x) for x in args.latencies.split(","))
    server_argv = [sys.executable, "-c", _SERVER, ",".join(str(x) for x in latencies)]
    if pin is not None:
        server_argv.append(",".join(map(str, sorted(pin[1]))))
    server = subprocess.Popen(server_argv,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=str(Path(__file__).resolve().parents[1]))
    assert server.stdout is not None
    ports = json.loads(server.stdout.readline())
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{ports['server']}")
    client.create_bucket(Bucket="bench")

    def use(latency: float | None) -> None:
        """Reach the store through the proxy of ``latency``; None: the server itself."""
        port = ports["server"] if latency is None else ports[str(latency)]
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
        with _filesystems._lock:
            _filesystems._clients.clear()
    rows = []
    notes = []
    traces: list[tuple[str, str, Trace]] = []
    default_ahead = storage.options().prefetch_files
    variants = (default_ahead, 0) if args.compare_open_ahead else (default_ahead,)
    with tempfile.TemporaryDirectory(prefix="feedq-remote-bench-") as tmp:
        for name in args.only.split(","):
            fmt, comp = SETS[name]
            paths = make_dataset(os.path.join(tmp, name), fmt, args.records, files=args.files,
                                 compression=comp, seed=1, layout="realistic")
            urls = []
            for p in paths:
                key = f"{name}/{os.path.basename(p)}"
                client.upload_file(p, "bench", key)
                urls.append(f"s3://bench/{key}")
            size = sum(os.path.getsize(p) for p in paths)
            per_rec = size / args.records
            kind = "csv" if fmt == "csv" else "tf"
            res: dict[str, list[float]] = {}
            firsts: list[float] = []
            peak = PeakHeld()
            cpu = CpuUse(server.pid)
            for rnd in range(args.rounds):
                res.setdefault("local", []).append(cpu(res, "local", run_pipeline,
                                                       paths, kind, comp, args.readers))
                for lat in latencies:
                    use(lat)
                    ms = int(lat * 1000)
                    for ahead in variants:
                        storage.configure(prefetch_files=ahead)
                        tag = "" if ahead == default_ahead else " no open-ahead"
                        storage.reset_statistics()
                        tr = Trace() if args.trace and rnd == args.rounds - 1 else None
                        res.setdefault(f"s3 +{ms} ms{tag}", []).append(cpu(
                            res, f"s3 +{ms} ms{tag}", run_pipeline, urls, kind, comp,
                            args.readers, firsts if ms == 50 and not tag else None))
                        if tr is not None:
                            tr.stop()
                            traces.append((name, f"s3 +{ms} ms{tag}", tr))
                        st = storage.statistics()
                        res.setdefault(f"wait {ms}{tag}", []).append(st["wait_s"])
                        res.setdefault(f"blocking {ms}{tag}", []).append(st["blocking_requests"])
                    storage.configure(prefetch_files=default_ahead)
                    res.setdefault(f"ceiling +{ms} ms", []).append(cpu(
                        res, f"ceiling +{ms} ms", run_ceiling, urls, args.readers,
                        args.read_ahead, block) / per_rec)
                if args.trace:  # the server's own rate, no proxy between
                    use(None)
                    res.setdefault("ceiling no proxy", []).append(cpu(
                        res, "ceiling no proxy", run_ceiling, urls, args.readers,
                        args.read_ahead, block) / per_rec)
            peak.stop()
            local = statistics.median(res["local"])
            for set_name, row, tr in traces:
                if set_name == name:
                    notes.append(f"{name} {row} trace: {tr.summary(local * per_rec)}")
            rows.append([name, "local", f"{local / 1e3:,.0f} k", "1.00", "", "", "", busy(res, "local")])
            for lat in latencies:
                ms = int(lat * 1000)
                c = statistics.median(res[f"ceiling +{ms} ms"])
                for ahead in variants:
                    tag = "" if ahead == default_ahead else " no open-ahead"
                    r = statistics.median(res[f"s3 +{ms} ms{tag}"])
                    w = statistics.median(res[f"wait {ms}{tag}"])
                    b = statistics.median(res[f"blocking {ms}{tag}"])
                    rows.append([name, f"s3 +{ms} ms{tag}", f"{r / 1e3:,.0f} k",
                                 f"{r / local:.2f}", f"{c / 1e3:,.0f} k ({r / c:.2f})",
                                 f"{w:.2f} s", f"{b:.0f}", busy(res, f"s3 +{ms} ms{tag}")])
                rows.append([name, f"ceiling +{ms} ms", "", "", "", "", "", busy(res, f"ceiling +{ms} ms")])
            if args.trace:
                c = statistics.median(res["ceiling no proxy"])
                rows.append([name, "ceiling, no proxy", "", "", f"{c / 1e3:,.0f} k", "", "",
                             busy(res, "ceiling no proxy")])
            notes.append(f"{name}: {size / 1e6:.1f} MB, {per_rec:.0f} B/record; time to first "
                         f"batch at +50 ms: median "
                         f"{statistics.median(firsts) if firsts else float('nan'):.2f} s; peak held "
                         f"by one open file {peak.peak / (1 << 20):.1f} MiB (bound "
                         f"{(args.read_ahead + 1) * block / (1 << 20):g} MiB)")
    assert server.stdin is not None
    server.stdin.close()
    server.wait(timeout=30)
    print(table(rows, ["set", "source", "records/s", "x local", "ceiling records/s (x ceiling)",
                       "readers waited on the store", "blocking requests",
                       "CPU s/s: this / server"]))
    for n in notes:
        print("#", n)


if __name__ == "__main__":
    main()
