"""The ``feedq`` command: ``demo``, ``bench``, ``make-data``, ``inspect``, ``cluster``.

Errors print as one line (``feedq: error: ...``) with exit status 1, or a
traceback with ``--debug`` (see ``feedq.cli._util``). Ctrl-C stops a running
pipeline cleanly and prints what was measured so far (exit status 130).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import click
import numpy as np

from feedq import __version__, _native, storage
from feedq.cli._cluster import cluster
from feedq.cli._formats import FORMATS, detect_format, is_stream
from feedq.cli._imageset import AUGMENTS
from feedq.cli._schema import DEFAULT_SAMPLE, OnError
from feedq.cli._util import CONTEXT, ProgramGroup, fail, guard, set_debug
from feedq.cli.datasets import FIXED_RECORD_BYTES, LAYOUTS, make_dataset, make_image_dataset

__all__ = ["main"]

_MAKE_COMPRESSIONS = click.Choice(["none", "gzip", "zlib"], case_sensitive=False)
_COMPRESSIONS = click.Choice(["none", "gzip", "zlib", "zstd"], case_sensitive=False)
_COMPRESSION_HELP = ("none, gzip, zlib or zstd (zstd: pip install \"feedq[zstd]\"; default: from the file "
                     "name or its first bytes).")
_SAMPLE_HELP = "Records the schema is inferred from: the union of the first N readable ones."
_ON_ERROR_HELP = ("skip: log (file:line) and count unreadable files, corrupt records and malformed "
                  "rows, and go on; raise: stop at the first with a one-line error.")


@click.group(cls=ProgramGroup, context_settings=CONTEXT, epilog="""\b
Examples:
  feedq demo
  feedq make-data data/ --format tfrecord --records 200000
  feedq bench data/
  feedq inspect data/part-00000.tfrecord
""")
@click.version_option(__version__, "--version", prog_name="feedq",
                      message=f"%(prog)s %(version)s (core: {_native.CORE})",
                      help="Show the version and the active core (native or python), and exit.")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
def main(debug: bool) -> None:
    """feedq: TF1-style input pipelines for eager Python, NumPy and PyTorch.

    Run `feedq demo` to see a pipeline train a small model on sample data,
    `feedq bench FILES...` to measure reading your own data.
    """
    set_debug(debug)


main.add_command(cluster)


# -- make-data -----------------------------------------------------------------------------


@main.command("make-data", context_settings=CONTEXT, epilog="""\b
Examples:
  feedq make-data data/tf --format tfrecord --records 1000000 --files 8
  feedq make-data data/csv --format csv --layout realistic --compression gzip
  feedq make-data data/tf --force        # replace the files of an earlier run
  feedq make-data data/img --format images --records 8000 --files 8
""")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice((*FORMATS, "images")), default="tfrecord",
              show_default=True,
              help="File format to write; images: ImageNet-like JPEGs (needs the image extra) in "
                   "OUT/folders, OUT/tfrecord and OUT/tar.")
@click.option("--layout", type=click.Choice(LAYOUTS), default="basic", show_default=True,
              help="basic: the benchmark records (fixed sizes); realistic (csv, tfrecord): variable-length "
                   "Examples {ids: 0-20 int64, label: 0-999, tag: bytes, x: 32 floats}, CSV fields of "
                   "varying widths.")
@click.option("--records", type=click.IntRange(min=0), default=100_000, show_default=True,
              help="Records in all, split evenly over the files.")
@click.option("--files", type=click.IntRange(min=1), default=4, show_default=True,
              help="Files to write (part-00000.<ext>, ...).")
@click.option("--compression", type=_MAKE_COMPRESSIONS, default="none", show_default=True,
              help="Compress each file (parquet: a Parquet codec).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Random seed: the same seed writes the same bytes.")
@click.option("--force", is_flag=True, help="Replace existing files of the same names.")
def make_data(out: str, fmt: str, layout: str, records: int, files: int, compression: str, seed: int,
              force: bool) -> None:
    """Write a synthetic dataset into the folder OUT (or a store's prefix:
    s3://bucket/prefix, uploaded once written).

    basic layouts: csv: 8 floats + int label; tfrecord: Example {x: 32
    floats, label: int64}; fixed: 132-byte records (32 float32 + int32);
    parquet: x0..x7 + label; lines: text lines. Files are written whole or
    not at all: an interrupted run leaves no partial file or new folder.

    images: --records JPEGs about 500 x 375, about 100 KB each (some
    grayscale and progressive), labels i % 10, the same images in class
    folders, --files TFRecord shards (image/encoded, image/class/label) and
    --files tar shards (<key>.jpg + <key>.cls).
    """
    if layout != "basic" and fmt not in ("csv", "tfrecord"):
        raise click.UsageError(f"--layout {layout} is for csv and tfrecord, not {fmt}")
    if fmt == "images" and compression.lower() != "none":
        raise click.UsageError("--compression is not for images (JPEGs do not compress)")

    def images() -> None:
        t0 = time.perf_counter()
        try:
            written = make_image_dataset(out, records, shards=files, seed=seed, overwrite=force)
        except FileExistsError as exc:
            fail(f"{exc}; pass --force to overwrite")
        size = sum(os.path.getsize(p) for p in written.get("folders", []))
        click.echo(f"wrote {records:,} JPEGs ({size / 1e6:,.1f} MB) into {out}/folders, "
                   f"{out}/tfrecord ({files} shards) and {out}/tar ({files} shards) "
                   f"({time.perf_counter() - t0:.1f} s)")

    if fmt == "images":
        guard(images)

    def body() -> None:
        comp = None if compression.lower() == "none" else compression.upper()
        if comp and fmt == "parquet":
            comp = "snappy" if comp == "GZIP" else comp
        t0 = time.perf_counter()
        if storage.is_remote(out):
            size, count = _make_remote(out, fmt, records, files, comp, seed, layout, force)
            click.echo(f"wrote {records:,} {fmt} records ({layout}) in {count} files, {size / 1e6:,.1f} MB, "
                       f"to {out} ({time.perf_counter() - t0:.1f} s)")
            return
        try:
            paths = make_dataset(out, fmt, records, files=files, compression=comp, seed=seed, layout=layout,
                                 overwrite=force)
        except FileExistsError as exc:
            fail(f"{exc}; pass --force to overwrite")
        size = sum(os.path.getsize(p) for p in paths)
        click.echo(f"wrote {records:,} {fmt} records ({layout}) in {len(paths)} files, {size / 1e6:,.1f} MB, "
                   f"to {out} ({time.perf_counter() - t0:.1f} s)")

    guard(body, reads_data=True)


def _make_remote(out: str, fmt: str, records: int, files: int, comp: str | None, seed: int,
                 layout: str, force: bool) -> tuple[int, int]:
    """make-data into a store: the files are made in a temporary folder, then
    uploaded (each object appears whole when its upload completes)."""
    with tempfile.TemporaryDirectory(prefix="feedq-make-data-") as tmp:
        paths = make_dataset(os.path.join(tmp, "out"), fmt, records, files=files, compression=comp,
                             seed=seed, layout=layout)
        targets = [f"{out.rstrip('/')}/{os.path.basename(p)}" for p in paths]
        if not force:
            existing = [t for t in targets if storage.exists(t)]
            if existing:
                fail(f"{existing[0]} exists ({len(existing)} of the objects); pass --force to overwrite")
        size = 0
        for path, target in zip(paths, targets):
            sink = storage.open_output(target)
            with open(path, "rb") as src:
                while chunk := src.read(8 << 20):
                    sink.write(chunk)
                    size += len(chunk)
            sink.close()
    return size, len(paths)


# -- inspect -------------------------------------------------------------------------------


@main.command(context_settings=CONTEXT, epilog="""\b
Examples:
  feedq inspect data/part-00000.tfrecord
  feedq inspect data/part-00000.csv --head 10 --sample 10000
  feedq inspect data/part-00000.parquet --json
  feedq inspect img/folders                      # images: count, labels, sizes, bad images
""")
@click.argument("file", type=click.Path())
@click.option("--format", "fmt", type=click.Choice((*FORMATS, "images")), default=None,
              help="Override detection from the extension / magic bytes. images: an image dataset "
                   "(detected without it: a root of class folders, a tar shard, an image file, a "
                   "TFRecord file with image/encoded).")
@click.option("--compression", type=_COMPRESSIONS, default=None, help=_COMPRESSION_HELP)
@click.option("--head", type=click.IntRange(min=0), default=3, show_default=True, help="Records to show.")
@click.option("--sample", type=click.IntRange(min=1), default=DEFAULT_SAMPLE, show_default=True,
              help=_SAMPLE_HELP)
@click.option("--record-bytes", type=click.IntRange(min=1), default=FIXED_RECORD_BYTES, show_default=True,
              help="Record size of fixed-length files.")
@click.option("--on-error", type=click.Choice(["raise", "skip"]), default="raise", show_default=True,
              help=_ON_ERROR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def inspect(file: str, fmt: str | None, compression: str | None, head: int, sample: int, record_bytes: int,
            on_error: str, as_json: bool) -> None:
    """Count the records of FILE, show its inferred schema and first records.

    Example features show as name, kind and value counts (a range when they
    vary, and in how many records when some lack them); records show
    decoded. SequenceExample records show their context features the same way,
    and their feature lists with kind, steps and values per step.

    An image dataset (a TFRecord file of Examples with image/encoded, a tar
    shard, a root of class folders, an image file) shows as images: their
    count, the labels, and for a sample of --sample images the formats,
    sizes, channels, JPEG subsampling, and the bad images by name (each
    sampled image is fully decoded).
    """
    def body() -> None:
        from feedq.cli._inspect import inspect_file, render_text

        if re.search(r"[*?\[]", file) and not os.path.exists(file):
            raise click.UsageError(f"{file} is a pattern: inspect reads one file "
                                   "(feedq bench reads every file a pattern matches)")
        found = _inspect_images_of(file, fmt, compression)
        if found is not None:
            from feedq.cli._inspect_images import inspect_images, render_images_text

            report = inspect_images(found, file, sample=sample, head=head,
                                    on_error=cast(OnError, on_error))
            if as_json:
                click.echo(json.dumps(report, indent=2))
            else:
                for line in render_images_text(report):
                    click.echo(line)
            return
        if os.path.isdir(file):
            raise click.UsageError(f"{file} is a folder: inspect reads one file of it "
                                   "(feedq bench reads a whole folder)")
        f, comp = _format_of([file], fmt, compression)
        _refuse_streams([file], f)
        report = inspect_file(file, f, comp, record_bytes=record_bytes, sample=sample, head=head,
                              on_error=cast(OnError, on_error))
        if as_json:
            click.echo(json.dumps(report, indent=2))
        else:
            for line in render_text(report):
                click.echo(line)

    guard(body, reads_data=True)


def _inspect_images_of(file: str, fmt: str | None, compression: str | None) -> Any:
    """The image dataset ``feedq inspect FILE`` is about, or None (records)."""
    if fmt not in (None, "images") or storage.is_remote(file) or is_stream(file):
        return None
    from feedq.cli._imageset import detect_images, tfrecord_images
    from feedq.cli._schema import infer_schema

    found = detect_images([file])
    if found is None and not os.path.isdir(file):
        f, comp = _format_of([file], None, compression)
        if f == "tfrecord":
            found = tfrecord_images([file], infer_schema([file], f, comp, sample=10))
    if found is None and fmt == "images":
        raise click.UsageError(f"{file}: not an image dataset (a root of class folders, a tar shard, "
                               "an image file, or TFRecords of Examples with image/encoded)")
    return found


# -- bench ---------------------------------------------------------------------------------


def _format_of(paths: list[str], fmt: str | None, compression: str | None) -> tuple[str, str | None]:
    comp_opt = None if compression is None else (None if compression.lower() == "none" else compression.upper())
    if fmt is not None:
        if compression is None:
            if fmt == "fixed":
                return fmt, None
            try:  # the compression only: the format was given
                _, comp_guess = detect_format(paths[0])
            except ValueError:
                comp_guess = None
            return fmt, comp_guess
        return fmt, comp_opt
    found = {detect_format(p) for p in paths}
    if len(found) > 1:
        raise click.UsageError(f"files of different formats: {sorted(found, key=str)}; pass --format")
    f, comp = found.pop()
    return f, comp_opt if compression is not None else comp


def _refuse_streams(files: list[str], fmt: str, epochs: int = 1) -> None:
    """A pipe or device can be read only once: refuse what would read it twice
    (a schema inferred from its first records, more than one epoch) instead of
    losing those records or waiting forever for a writer that has gone."""
    streams = [p for p in files if is_stream(p)]
    if not streams:
        return
    why = None
    if fmt in ("csv", "tfrecord", "parquet"):
        why = f"a {fmt} schema is inferred from its first records, which could not be read again after that"
    elif epochs > 1:
        why = "--epochs > 1 reads it again"
    if why is not None:
        raise click.UsageError(f"{streams[0]} is a pipe or device and can be read only once: {why}; "
                               f"save it to a file first (--format lines and fixed read a pipe once)")


def _print_table(result: Any, title: str) -> None:
    r = result
    unit = "images" if r.format == "images" else "records"
    rows = [
        ("format", r.format),
        ("compression", r.compression),
        ("files", f"{r.files}"),
        (unit, f"{r.records:,}"),
        ("batches", f"{r.batches:,}"),
        ("seconds", f"{r.seconds:.2f}"),
        (f"{unit}/s", f"{r.records_per_s:,.0f}"),
        ("MB/s (encoded images)" if unit == "images" else "MB/s (record payload)", f"{r.mb_per_s:,.1f}"),
        ("CPU seconds (process)",
         f"{r.cpu_seconds:.2f} ({r.cpu_seconds / r.seconds:.1f} of {r.cpus} CPUs)"),
        ("consumer in take (wait + copy)", f"{100 * r.consumer_wait_fraction:.1f} %"),
        ("device feeder blocked on the pipeline" if "device" in r.extra else
         "consumer blocked (waiting)", f"{100 * r.consumer_blocked_fraction:.1f} %"),
        ("batch queue fill (mean / max)", f"{100 * r.batch_queue_fill_mean:.0f} % / {100 * r.batch_queue_fill_max:.0f} %"),
        ("filename queue fill (mean)", f"{100 * r.filename_queue_fill_mean:.0f} %"),
        ("skipped bad records/files", f"{r.skipped_errors:,}"),
        ("stopped by", r.stopped_by),
    ]
    if unit == "images":
        from feedq.cli._bench import cpu_ms_per_image

        per = cpu_ms_per_image(r)
        rows.insert(9, ("CPU ms per image (process)", "-" if per is None else f"{per:.2f}"))
    rows += [(k, str(v)) for k, v in r.extra.items()]
    width = max(len(k) for k, _ in rows)
    click.echo(title)
    for k, v in rows:
        click.echo(f"  {k.ljust(width)}  {v}")


def _print_stages(result: Any) -> None:
    """The per-stage table (``feedq.format_report``) and the verdict, in the
    bench pipeline's terms (``feedq.cli._bench.verdict_line``)."""
    from feedq.cli._bench import verdict_line
    from feedq.pipeline import format_report

    click.echo("")
    if result.statistics is not None:
        lines = format_report(result.statistics).splitlines()
        for line in lines[:-1] if lines[-1].startswith("bottleneck:") else lines:
            click.echo(f"  {line}" if line else "")
    click.echo(verdict_line(result))


def _progress_printer(enabled: bool) -> Any:
    """Live figures and queue fill bars on stderr (see ``feedq.cli._progress``), or None."""
    if not enabled:
        return None
    from feedq.cli._progress import LiveProgress

    return LiveProgress()


_COMPARE_HELP = (
    "Also read the same files, in this run, through tf.data (TFRecordDataset / TextLineDataset / "
    "FixedLengthRecordDataset with --readers parallel reads, .batch, .map of parse_example / "
    "decode_csv / decode_raw with the inferred schema, .prefetch) and torch DataLoader with 0 "
    "and 2 workers (an "
    "IterableDataset reading and decoding each record in Python: protobuf Example parse, typed CSV "
    "fields, np.frombuffer; a collate_fn stacking the schema's dtypes); the runs alternate. Prints "
    "records/s, MB/s, CPU seconds and feedq's speed-up over each; a loader that is not installed "
    "says so. With --shuffle, each shuffles the file order and keeps a shuffle buffer of "
    "--min-after-dequeue + --batch-size records. On images: tf.data (TFRecordDataset or read_file, "
    "map of sample_distorted_bounding_box + decode_and_crop_jpeg + resize + flip, or the eval "
    "resize + centre crop, AUTOTUNE; no tar) and DataLoader with 0 and 2 workers opening each "
    "image with Pillow (the same crop, resize and flip), uint8 batches; images/s, CPU ms per image.")


@main.command(context_settings=CONTEXT, epilog="""\b
Examples:
  feedq bench data/                              # every file in data/
  feedq bench data/*.csv --batch-size 1024 --readers 4 --records 1000000
  feedq bench data/ --shuffle --epochs 3 --on-error skip --json
  feedq bench data/ --compare --repeats 5        # beside tf.data and torch DataLoader
  feedq bench img/tfrecord --threads 2           # images: decode + random resized crop + flip
  feedq bench img/folders --augment eval --compare
""")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice((*FORMATS, "images")), default=None,
              help="Override detection from the extension / magic bytes. images: an image dataset "
                   "(detected without it: a root of class folders, tar shards, image files, "
                   "TFRecords with image/encoded; --format tfrecord reads such TFRecords as "
                   "records).")
@click.option("--compression", type=_COMPRESSIONS, default=None, help=_COMPRESSION_HELP)
@click.option("--augment", type=click.Choice(AUGMENTS), default="train", show_default=True,
              help="Images: train: decode + random resized crop --size + random flip "
                   "(decode_random_resized_crop), shuffled by default; eval: resize the shorter "
                   "side to --size x 8/7 + centre crop --size (decode_resize_center_crop). "
                   "Batches are uint8 [n, size, size, 3] + int64 labels.")
@click.option("--size", type=click.IntRange(min=1), default=224, show_default=True,
              help="Images: the output height and width.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Records per batch delivered to the consumer.")
@click.option("--readers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Reader objects, each with its own thread(s).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Threads per reader (reads are serialised per reader; decoding runs in parallel).")
@click.option("--shuffle/--no-shuffle", default=None,
              help="Shuffle file order and records (shuffle_batch_join). Default: no; for images "
                   "with --augment train, yes.")
@click.option("--min-after-dequeue", type=click.IntRange(min=0), default=None,
              help="Records the shuffle queue keeps after each dequeue (with --shuffle). Default: "
                   "1000; for images 2 x --batch-size.")
@click.option("--epochs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Passes over the files.")
@click.option("--device", default=None, help="Deliver batches to a device (e.g. cpu, cuda:0).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds.")
@click.option("--records", "max_records", type=click.IntRange(min=1), default=None,
              help="Stop after this many records (at the end of the batch that reaches it).")
@click.option("--record-bytes", type=click.IntRange(min=1), default=FIXED_RECORD_BYTES, show_default=True,
              help="Record size of fixed-length files.")
@click.option("--sample", type=click.IntRange(min=1), default=DEFAULT_SAMPLE, show_default=True,
              help=_SAMPLE_HELP)
@click.option("--on-error", type=click.Choice(["raise", "skip"]), default="raise", show_default=True,
              help=_ON_ERROR_HELP)
@click.option("--block-records", type=click.IntRange(min=1), default=None,
              help="Records per reader block (default: max(batch size, 4096); images: 64, one "
                   "decode call; class folders and image files: 1 file); blocks are re-sliced into "
                   "batches.")
@click.option("--direct", is_flag=True,
              help="One reader in the main thread, no queues or threads: the reader+decoder limit, "
                   "as benchmarks/readers.py measures it.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--progress/--no-progress", default=None,
              help="Live figures and queue fill bars on stderr (default: when stderr is a "
                   "terminal; "
                   "plain lines every 2 s when it is not).")
@click.option("--compare", is_flag=True, help=_COMPARE_HELP)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="With --compare: rounds, each loader once per round; medians are reported.")
def bench(paths: tuple[str, ...], fmt: str | None, compression: str | None, augment: str, size: int,
          batch_size: int, readers: int, threads: int, shuffle: bool | None,
          min_after_dequeue: int | None, epochs: int, device: str | None,
          duration: float | None, max_records: int | None, record_bytes: int, sample: int, on_error: str,
          block_records: int | None, direct: bool, as_json: bool, progress: bool | None,
          compare: bool, repeats: int) -> None:
    """Measure reading PATHS (files or folders) into decoded batches.

    MB/s counts the payload of the records delivered (line, record or row
    bytes; not file bytes, not compressed bytes).

    Image datasets (a root of class folders, tar shards, image files,
    TFRecords of Examples with image/encoded) are decoded and augmented
    (--augment, --size) into uint8 batches: images/s, CPU ms per image, MB/s
    of encoded images. See docs/images.md.
    """
    def body() -> int:
        from feedq.cli._bench import run_bench

        policy = cast(OnError, on_error)
        files, f, schema = _bench_schema(list(paths), fmt, compression, record_bytes, policy, sample,
                                         epochs, augment, size)
        images = f == "images"
        shuffled = (images and augment == "train") if shuffle is None else shuffle
        keep = min_after_dequeue if min_after_dequeue is not None else (
            2 * batch_size if images else 1000)
        _check_device(device)
        if compare and device:
            raise click.UsageError("--compare delivers batches on the host: drop --device")
        show = _progress_printer(sys.stderr.isatty() if progress is None else progress)
        run = functools.partial(run_bench, schema.images.files if images else files, schema,
                                batch_size=batch_size, readers=readers,
                                threads=threads, shuffle=shuffled,
                                min_after_dequeue=keep, epochs=epochs,
                                duration=duration, max_records=max_records, on_error=policy,
                                device=device, block_records=block_records, direct=direct)
        remote = any(storage.is_remote(p) for p in files)
        if compare and remote:
            raise click.UsageError("--compare reads local files only (the tf.data and DataLoader "
                                   "loaders it runs beside feedq do not read URLs)")
        storage.reset_statistics()
        rows: list[Any] = []
        buffer = keep + batch_size if shuffled else 0
        if compare:
            result, rows = _compare_runs(run, files, schema, readers=readers,
                                         batch_size=batch_size, epochs=epochs, duration=duration,
                                         max_records=max_records, repeats=repeats, show=show,
                                         shuffle_buffer=buffer)
        else:
            result = run(progress=show)
            if show is not None:
                show.finish()
        if images:
            result.extra["dataset"] = schema.info["dataset"]
            result.extra["augment"] = schema.info["transform"] + (
                f", shuffled (min_after_dequeue {keep:,})" if shuffled else "")
        out = result.as_dict()
        store = storage.statistics() if remote else None
        if store is not None:
            out["storage"] = store
        if compare:
            out["compare"] = [r.as_dict() for r in rows]
        if as_json:
            click.echo(json.dumps(out, indent=2))
        else:
            title = (f"feedq bench: images ({schema.info['container']})" if images
                     else f"feedq bench: {len(files)} {f} file(s)")
            _print_table(result, title)
            _print_stages(result)
            if store is not None:
                click.echo(_store_line(store, result.seconds, readers * threads))
            if compare:
                from feedq.cli._compare import render, what_they_do

                click.echo("")
                if images:
                    from feedq.cli._compare_images import image_notes

                    notes = image_notes(schema, batch_size, readers, buffer)
                else:
                    notes = what_they_do(schema, batch_size, readers, buffer)
                for line in render(rows, repeats, notes, unit="images" if images else "records"):
                    click.echo(line)
        return 130 if result.stopped_by == "interrupted" else 0

    guard(body, reads_data=True)


def _compare_runs(run: Callable[..., Any], files: list[str], schema: Any, *, readers: int,
                  batch_size: int, epochs: int, duration: float | None, max_records: int | None,
                  repeats: int, show: Any, shuffle_buffer: int) -> tuple[Any, list[Any]]:
    """feedq's run beside tf.data and DataLoader, alternating; feedq's median
    run (by records/s) and the comparison rows."""
    from feedq.cli._bench import cpu_seconds
    from feedq.cli._compare import compare, competitors
    from feedq.cli._measure import Limits, Measure, System

    results: list[Any] = []

    def feedq_run(limits: Limits) -> Measure:
        c0, t0 = cpu_seconds(), time.perf_counter()
        r = run(duration=limits.duration, max_records=limits.max_records)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        results.append(r)
        if r.stopped_by == "interrupted":
            raise KeyboardInterrupt
        return Measure(r.records, r.payload_bytes, wall, cpu)

    what = f"this pipeline ({readers} reader{'s' if readers != 1 else ''}, batches of {batch_size})"
    if schema.fmt == "images":
        from feedq.cli._compare_images import image_competitors

        others = image_competitors(schema, batch_size=batch_size, readers=readers,
                                   shuffle_buffer=shuffle_buffer)
    else:
        others = competitors(files, schema, batch_size=batch_size, readers=readers,
                             shuffle_buffer=shuffle_buffer)
    systems = [System("feedq", what, feedq_run), *others]
    limits = Limits(batch_size, epochs, duration, max_records, readers, shuffle_buffer)
    rows, interrupted = compare(systems, limits, repeats,
                                progress=None if show is None else show.message)
    # results[0] is the warm-up run: shown only when Ctrl-C came before any other.
    measured = sorted(results[1:] or results, key=lambda r: r.records_per_s)
    if not measured:
        raise KeyboardInterrupt
    result = measured[len(measured) // 2]
    if interrupted:
        result.stopped_by = "interrupted"
    return result, rows


def _bench_schema(paths: list[str], fmt: str | None, compression: str | None, record_bytes: int,
                  policy: OnError, sample: int, epochs: int, augment: str, size: int,
                  ) -> tuple[list[str], str, Any]:
    """(files, format, schema) of what bench reads: an image dataset's
    (format ``images``, see ``feedq.cli._imageset``) or the records' inferred schema."""
    from feedq.cli._imageset import detect_images, image_schema, tfrecord_images
    from feedq.cli._schema import infer_schema

    found = detect_images(paths) if fmt in (None, "images") else None
    if found is not None:
        return found.files, "images", image_schema(found, cast(Any, augment), size)
    files = _expand(paths)
    f, comp = _format_of(files, None if fmt == "images" else fmt, compression)
    _refuse_streams(files, f, epochs)
    schema = infer_schema(files, f, comp, record_bytes, on_error=policy, sample=sample)
    if fmt in (None, "images"):
        found = tfrecord_images(files, schema)
        if found is not None:
            return files, "images", image_schema(found, cast(Any, augment), size)
    if fmt == "images":
        raise click.UsageError(f"{paths[0]}: not an image dataset (a root of class folders, tar "
                               "shards, image files, or TFRecords of Examples with image/encoded)")
    return files, f, schema


def _expand(paths: list[str]) -> list[str]:
    files: list[str] = []
    for p in paths:
        if storage.is_remote(p):
            files.extend(_expand_url(p))
            continue
        path = Path(storage.local_path(p))
        if path.is_dir():
            found = sorted(str(x) for x in path.iterdir() if x.is_file() and not x.name.startswith("."))
            if not found:
                raise click.UsageError(f"{p}: folder holds no files")
            files.extend(found)
        elif path.exists():
            files.append(p)
        else:
            from feedq.errors import NotFoundError

            raise NotFoundError(f"{p}; No such file or directory")
    return files


def _store_line(store: dict[str, float], seconds: float, threads: int) -> str:
    """The store's part of a bench run: requests, bytes, retries, waiting."""
    share = store["wait_s"] / (seconds * threads) if seconds > 0 and threads else 0.0
    line = (f"store: {int(store['requests']):,} requests, {store['bytes'] / 1e6:,.1f} MB, "
            f"{int(store['retries'])} retries ({int(store['throttled'])} throttled), readers waited "
            f"{store['wait_s']:.2f} s on it ({share:.0%} of their time)")
    if share >= 0.5:
        line += ": limited by the store (more --readers, or larger read-ahead: docs/storage.md)"
    return line


def _expand_url(url: str) -> list[str]:
    """A store's URL: a glob, an object, or a prefix (a "folder": the objects right under it)."""
    from feedq.errors import NotFoundError

    if any(c in url.split("://", 1)[1] for c in "*?["):
        found = storage.glob(url)
    elif storage.exists(url):
        return [url]
    else:
        found = [u for u in storage.glob(url.rstrip("/") + "/*")
                 if not u.rsplit("/", 1)[1].startswith(".")]
    if not found:
        raise NotFoundError(f"{url}; No such file or directory (no object matches)")
    return found


def _check_device(device: str | None) -> None:
    if not device or device in ("cpu", "/cpu:0", "host"):
        return
    try:
        import torch
    except ImportError:
        raise click.UsageError(f'--device {device} needs torch: pip install "feedq[torch]"') from None
    if ("cuda" in device.lower() or "gpu" in device.lower()) and not torch.cuda.is_available():
        raise click.UsageError(f"--device {device}: CUDA is not available on this machine")


# -- demo ------------------------------------------------------------------------------------


@main.command(context_settings=CONTEXT, epilog="""\b
Examples:
  feedq demo
  feedq demo --duration 30 --records 200000 --dir /tmp/feedq-demo
""")
@click.option("--dir", "folder", type=click.Path(file_okay=False), default=None,
              help="Where to write the sample data (default: a temporary folder; files there are replaced).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="Seconds to train.")
@click.option("--records", type=click.IntRange(min=1000), default=50_000, show_default=True,
              help="Sample records per format.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Records per training batch.")
@click.option("--progress/--no-progress", default=None, help="Live progress (default: when stderr is a terminal).")
def demo(folder: str | None, duration: float, records: int, batch_size: int, progress: bool | None) -> None:
    """Make sample data (CSV, TFRecord, fixed-length) and train a tiny model on it.

    The pipeline: string_input_producer -> readers -> shuffle_batch -> model
    (PyTorch when installed, else NumPy), for --duration seconds.
    """
    def body() -> int:
        with tempfile.TemporaryDirectory(prefix="feedq-demo-") as tmp:
            root = Path(folder) if folder else Path(tmp)
            return _demo(root, duration, records, batch_size,
                         sys.stderr.isatty() if progress is None else progress)

    guard(body, reads_data=True)


def _demo(root: Path, duration: float, records: int, batch_size: int, progress: bool) -> int:
    from feedq.cli._bench import run_bench, verdict_line
    from feedq.cli._schema import infer_schema

    click.echo(f"feedq demo: writing {records:,} sample records per format to {root}")
    sets = {fmt: make_dataset(root / fmt, fmt, records, files=4, overwrite=True)
            for fmt in ("csv", "tfrecord", "fixed")}
    model = _TinyModel()
    click.echo(f"model: {model.kind} logistic regression on the features; label = class {model.target}")
    per = duration / len(sets)
    code = 0
    for fmt, paths in sets.items():
        schema = infer_schema(paths, fmt, None, FIXED_RECORD_BYTES)
        show = _progress_printer(progress)
        result = run_bench(paths, schema, batch_size=batch_size, readers=2, shuffle=True,
                           min_after_dequeue=2000, epochs=None, duration=per,
                           consume=functools.partial(model.step, fmt), progress=show, device="cpu")
        if show is not None:
            show.finish()
        result.extra["model loss (last)"] = f"{model.last_loss:.4f}"
        result.extra["train steps"] = f"{model.steps_by.get(fmt, 0):,}"
        _print_table(result, f"\n{fmt}: string_input_producer -> 2 readers -> shuffle_batch({batch_size}) "
                             "-> device feeder (cpu) -> model")
        click.echo(verdict_line(result))
        if result.stopped_by == "interrupted":
            code = 130
            break
    click.echo(f"\ndone: {model.steps:,} training steps; loss went from {model.first_loss:.4f} "
               f"to {model.last_loss:.4f}")
    return code


class _TinyModel:
    """Logistic regression on whatever features a format gives: PyTorch when
    installed (zero-copy torch.from_numpy), NumPy otherwise."""

    def __init__(self) -> None:
        self.target = 3
        self.steps = 0
        self.first_loss = float("nan")
        self.last_loss = float("nan")
        self.params: dict[str, Any] = {}
        self.steps_by: dict[str, int] = {}
        try:
            import torch

            self.torch: Any = torch
            self.kind = "PyTorch"
            # A tiny model gains nothing from intra-op threads, and their
            # spinning starves the reader threads on small machines.
            torch.set_num_threads(1)
            # Warm up (thread pools, first-call costs) before anything is timed.
            net = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            net(torch.zeros(2, 4)).sum().backward()
            opt.step()
        except ImportError:
            self.torch = None
            self.kind = "NumPy"

    @staticmethod
    def _features(fmt: str, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        if fmt == "csv":
            *xs, label = batch
            return np.stack(xs, axis=1).astype(np.float32), np.asarray(label)
        if fmt == "tfrecord":
            label, x = batch  # sorted feature names: label, x
            return x, label
        rec = batch  # fixed: [n, 132] uint8
        x = np.ascontiguousarray(rec[:, :128]).view("<f4")
        label = np.ascontiguousarray(rec[:, 128:132]).view("<i4")[:, 0]
        return x, label

    def step(self, fmt: str, batch: Any) -> None:
        x, label = self._features(fmt, batch)
        y = (label == self.target).astype(np.float32)
        if self.torch is not None:
            torch = self.torch
            if fmt not in self.params:
                self.params[fmt] = torch.nn.Linear(x.shape[1], 1)
                self.params[fmt + "/opt"] = torch.optim.SGD(self.params[fmt].parameters(), lr=0.5)
            net, opt = self.params[fmt], self.params[fmt + "/opt"]
            logits = net(torch.from_numpy(x)).squeeze(1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(y))
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = float(loss.detach())
        else:
            w = self.params.setdefault(fmt, np.zeros(x.shape[1] + 1, np.float32))
            z = x @ w[:-1] + w[-1]
            p = 1 / (1 + np.exp(-z))
            value = float(-np.mean(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7)))
            g = p - y
            w[:-1] -= 0.5 * (x.T @ g) / len(y)
            w[-1] -= 0.5 * g.mean()
        if self.steps == 0:
            self.first_loss = value
        self.last_loss = value
        self.steps += 1
        self.steps_by[fmt] = self.steps_by.get(fmt, 0) + 1


if __name__ == "__main__":  # pragma: no cover
    main()
