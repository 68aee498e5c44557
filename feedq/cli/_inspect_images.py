"""``feedq inspect`` on an image dataset (see :mod:`feedq.cli._imageset`):
what it is, how many images, the labels, and a sample of the images.

A TFRecord file or a tar shard is read once to the end: every image is
counted and every label seen. A class-folder root is counted from its
listing. The sample (``--sample`` images: the first ones of a file, evenly
spread over a folder tree) has each header read (format, size, channels,
chroma subsampling, progressive) and each image fully decoded, so that a bad
one (truncated, not an image, too many pixels) is named by its file and
record, with the decoder's reason. The report is plain JSON values.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from typing import Any

import numpy as np

from feedq.cli._imageset import TF_IMAGE, TF_LABEL, ImageSet, make_image_reader
from feedq.cli._schema import OnError, Schema, blocks_of
from feedq.image import decode_image, image_format
from feedq.readers import FixedLenFeature, parse_example

__all__ = ["inspect_images", "render_images_text"]

_BLOCK = 256
#: Bad images listed in the report (all are counted).
BAD_LISTED = 20
_CHANNELS = {"1": "gray", "3": "colour", "4": "CMYK", "2": "gray + alpha"}
_SUBSAMPLING = {"444": "4:4:4", "422": "4:2:2", "420": "4:2:0", "440": "4:4:0", "411": "4:1:1",
                "Gray": "gray"}


def inspect_images(images: ImageSet, path: str, *, sample: int, head: int,
                   on_error: OnError) -> dict[str, Any]:
    """The report of the image dataset ``images`` (``path`` as given).

    Raises:
        FeedqError: an unreadable file or record of the container
            (``on_error="raise"``); bad images are listed, not raised.
    """
    keys: list[str] = []
    data: list[bytes] = []
    labels_seen: Counter[int] = Counter()
    skipped = 0
    if images.container in ("tfrecord", "tar"):
        count, skipped = _read_shard(images, path, sample, on_error, keys, data, labels_seen)
    else:
        files = list(images.files)
        count = len(files)
        if images.folder is not None:
            labels_seen.update(int(x) for x in images.folder.labels.tolist())
        picked: list[int] = (np.unique(np.linspace(0, count - 1, num=min(sample, count)).astype(int)).tolist()
                             if count else [])
        for i in picked:
            with open(files[int(i)], "rb") as f:
                data.append(f.read())
            keys.append(files[int(i)])
    headers = [_header(d) for d in data]
    bad = _bad_images(data, keys)
    for b in bad:
        headers[b["row"]]["bad"] = True
    report: dict[str, Any] = {
        "file": path,
        "format": "images",
        "container": images.container,
        "dataset": images.describe(),
        "images": count,
        "skipped_errors": skipped,
        "labels": _labels(images, labels_seen),
        "sample": _summary(headers),
        "bad_images": [{"key": b["key"], "message": b["message"]} for b in bad[:BAD_LISTED]],
        "bad_in_sample": len(bad),
        "first_images": [{"key": k, **{n: v for n, v in h.items() if n != "bad"}}
                         for k, h in zip(keys[:head], headers[:head])],
    }
    return report


def _read_shard(images: ImageSet, path: str, sample: int, on_error: OnError, keys: list[str],
                data: list[bytes], labels_seen: Counter[int]) -> tuple[int, int]:
    """Count a TFRecord file's / tar shard's images, keep the first ``sample``."""
    schema = Schema("images", images.compression, [], [], [], images=images)
    reader = make_image_reader(schema, on_error, name="inspect")
    feats = {TF_IMAGE: FixedLenFeature([], "string")}
    if images.label_field == TF_LABEL:
        feats[TF_LABEL] = FixedLenFeature([], "int64")
    count = 0
    with reader:
        for block in blocks_of(reader, [path], _BLOCK):
            if images.container == "tfrecord":
                ex = parse_example(block, feats)
                encoded = ex[TF_IMAGE].tolist()
                if TF_LABEL in ex:
                    labels_seen.update(int(v) for v in np.asarray(ex[TF_LABEL]).reshape(-1).tolist())
                block_keys = block.keys().tolist()
            else:
                encoded = block[images.image_field or "jpg"].values().tolist()
                if images.label_field:
                    labels_seen.update(int(bytes(v).strip() or b"0")
                                       for v in block[images.label_field].values().tolist())
                block_keys = block.keys().tolist()
            room = sample - len(data)
            if room > 0:
                data.extend(bytes(e) for e in encoded[:room])
                keys.extend(k.decode("utf-8", "backslashreplace") for k in block_keys[:room])
            count += len(encoded)
        skipped = int(reader.num_errors_skipped())
    return count, skipped


def _bad_images(data: list[bytes], keys: list[str]) -> list[dict[str, Any]]:
    """The images of the sample that do not decode: row, key, reason."""
    if not data:
        return []
    key_col = np.empty(len(keys), dtype=object)
    key_col[:] = [k.encode() for k in keys]
    log = logging.getLogger("feedq.image")
    level = log.level
    log.setLevel(logging.ERROR)  # the report lists them: no log line per bad image
    try:
        batch = decode_image(data, channels=3, expand_animations=False, on_error="skip", keys=key_col)
    finally:
        log.setLevel(level)
    return [{"row": s.index, "key": keys[s.index], "message": s.message} for s in batch.skipped]


def _progressive(data: bytes) -> bool:
    """Whether a JPEG's frame is progressive (an SOF2 / SOF6 / ... marker before the scan)."""
    i = 2
    n = len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return False
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in (0xC2, 0xC6, 0xCA, 0xCE):
            return True
        if marker in (0xC0, 0xC1, 0xC3, 0xDA):
            return False
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return False


def _header(data: bytes) -> dict[str, Any]:
    """Format, size, channels (and for JPEG subsampling, progressive) from the header alone."""
    fmt = image_format(data)
    out: dict[str, Any] = {"format": fmt or "unknown", "bytes": len(data)}
    if fmt == "jpeg":
        from feedq.cli._images import simplejpeg_module

        try:
            h, w, colorspace, sub = simplejpeg_module().decode_jpeg_header(data)
        except ValueError:
            return out
        out.update(height=int(h), width=int(w),
                   channels={"Gray": 1, "CMYK": 4, "YCCK": 4}.get(colorspace, 3),
                   subsampling=_SUBSAMPLING.get(sub, str(sub)), progressive=_progressive(data))
    elif fmt is not None:
        import io

        from feedq.cli._images import pil_image

        try:
            with pil_image().open(io.BytesIO(data)) as im:
                out.update(height=int(im.height), width=int(im.width), channels=len(im.getbands()))
        except Exception:  # noqa: BLE001 - a bad header: the full decode names it
            pass
    return out


def _summary(headers: list[dict[str, Any]]) -> dict[str, Any]:
    sized = [h for h in headers if "height" in h]
    out: dict[str, Any] = {"images": len(headers),
                           "formats": dict(Counter(h["format"] for h in headers).most_common())}
    if sized:
        hs = [h["height"] for h in sized]
        ws = [h["width"] for h in sized]
        pixels = sorted(sized, key=lambda h: h["height"] * h["width"])
        mid = pixels[len(pixels) // 2]
        out["sizes"] = {"min": [min(hs), min(ws)], "median": [mid["height"], mid["width"]],
                        "max": [max(hs), max(ws)]}
        out["channels"] = {str(k): v for k, v in Counter(h["channels"] for h in sized).most_common()}
    jpegs = [h for h in sized if "subsampling" in h]
    if jpegs:
        out["subsampling"] = dict(Counter(h["subsampling"] for h in jpegs).most_common())
        out["progressive"] = sum(1 for h in jpegs if h["progressive"])
    if headers:
        nbytes = [h["bytes"] for h in headers]
        out["bytes"] = {"min": min(nbytes), "median": int(statistics.median(nbytes)), "max": max(nbytes)}
    return out


def _labels(images: ImageSet, seen: Counter[int]) -> dict[str, Any]:
    if images.folder is not None:
        return {"key": "class folders", "classes": len(images.folder.classes),
                "names": list(images.folder.classes[:10]),
                "per_class": [seen.get(i, 0) for i in range(len(images.folder.classes))][:10]}
    if not images.label_field:
        return {"key": None, "classes": 0}
    values = sorted(seen)
    return {"key": images.label_field, "classes": len(values),
            "range": [values[0], values[-1]] if values else None}


def render_images_text(report: dict[str, Any]) -> list[str]:
    """The report as lines of text."""
    n = report["images"]
    lines = [f"{report['file']}: images, {n:,} image{'s' if n != 1 else ''}; {report['dataset']}"
             + (f", {report['skipped_errors']:,} unreadable records skipped" if report["skipped_errors"] else "")]
    lab = report["labels"]
    if lab["key"] is None:
        lines.append("labels: none (label 0)")
    elif lab["key"] == "class folders":
        more = ", ..." if lab["classes"] > len(lab["names"]) else ""
        lines.append(f"labels: {lab['classes']} class folders ({', '.join(lab['names'])}{more}), "
                     "numbered from 0 in sorted order")
    else:
        span = f", values {lab['range'][0]}..{lab['range'][1]}" if lab.get("range") else ""
        lines.append(f"labels: {lab['key']}, {lab['classes']} distinct{span}")
    s = report["sample"]
    lines.append(f"sample of {s['images']:,} image{'s' if s['images'] != 1 else ''} (header read, "
                 "full decode):")
    lines.append("  formats: " + ", ".join(f"{k} {v:,}" for k, v in s["formats"].items()))
    if "sizes" in s:
        z = s["sizes"]
        lines.append(f"  sizes (h x w): min {z['min'][0]} x {z['min'][1]}, median "
                     f"{z['median'][0]} x {z['median'][1]}, max {z['max'][0]} x {z['max'][1]}")
        lines.append("  channels: " + ", ".join(f"{_CHANNELS.get(k, k + ' channels')} {v:,}"
                                                for k, v in s["channels"].items()))
    if "subsampling" in s:
        lines.append("  JPEG subsampling: " + ", ".join(f"{k} {v:,}" for k, v in s["subsampling"].items())
                     + f"; progressive: {s['progressive']:,}")
    if "bytes" in s:
        b = s["bytes"]
        lines.append(f"  encoded bytes: median {b['median']:,} (min {b['min']:,}, max {b['max']:,})")
    bad = report["bad_images"]
    if not report["bad_in_sample"]:
        lines.append("bad images: none in the sample")
    else:
        lines.append(f"bad images: {report['bad_in_sample']:,} in the sample"
                     + (f" (the first {len(bad)} listed)" if len(bad) < report["bad_in_sample"] else "") + ":")
        lines.extend(f"  {b['key']}: {b['message']}" for b in bad)
    first = report["first_images"]
    if first:
        lines.append(f"first {len(first)} image{'s' if len(first) != 1 else ''}:")
        for im in first:
            size = (f" {im['height']} x {im['width']} x {im['channels']}" if "height" in im else "")
            extra = "".join(f", {im[k]}" for k in ("subsampling",) if k in im)
            extra += ", progressive" if im.get("progressive") else ""
            lines.append(f"  {im['key']}: {im['format']}{size}{extra}, {im['bytes']:,} bytes")
    return lines
