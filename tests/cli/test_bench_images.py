"""``feedq bench`` / ``feedq inspect`` / ``--compare`` on image datasets (issue 21):
every container detected, every image delivered once with its label, bad
images named, the comparison rows run or say why not.

Ground truth: ``make_image_dataset`` (24 images, 3 classes, 2 shards), the
same images in each container. In-process (click's CliRunner), so TensorFlow
and torch are imported once for the module.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from feedq.cli import main
from feedq.cli.datasets import make_image_dataset

pytest.importorskip("simplejpeg")
pytestmark = pytest.mark.timeout(120)

N, CLASSES = 24, 3
LOADERS = ["feedq", "tf.data", "DataLoader, 0 workers", "DataLoader, 2 workers"]


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_json(*args: str) -> dict[str, Any]:
    res = run(*args, "--json")
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    make_image_dataset(root, N, classes=CLASSES, shards=2, seed=4)
    return root


def encoded_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in (data / "folders").rglob("*.jpg"))


@pytest.mark.parametrize(("where", "container"), [
    ("tfrecord", "tfrecord"), ("tar", "tar"), ("folders", "folders"),
])
def test_bench_detects_each_container_and_delivers_every_image_once(
        data: Path, where: str, container: str) -> None:
    out = run_json("bench", str(data / where), "--batch-size", "8", "--no-progress")
    assert out["format"] == "images"
    assert out["records"] == out["images"] == N
    # The payload is the encoded images: the same bytes as the files hold.
    assert out["payload_bytes"] == encoded_bytes(data)
    assert out["images_per_s"] == out["records_per_s"] > 0
    assert out["cpu_ms_per_image"] == pytest.approx(1000 * out["cpu_seconds"] / N)
    assert out["extra"]["augment"].startswith("train: random resized crop 224 + flip, shuffled")
    assert out["extra"]["dataset"].startswith({"tfrecord": "TFRecord Examples", "tar": "tar shards",
                                              "folders": "class folders"}[container])
    assert out["verdict"].startswith("bottleneck:")
    assert out["skipped_errors"] == 0


def test_bench_delivers_uint8_batches_with_each_label(data: Path) -> None:
    from feedq.cli._bench import run_bench
    from feedq.cli._imageset import detect_images, image_schema

    for where in ("tar", "folders"):
        found = detect_images([str(data / where)])
        assert found is not None
        schema = image_schema(found, "train", 32)
        labels: list[int] = []

        def consume(batch: Any, labels: list[int] = labels) -> None:
            images, lab = batch
            assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3)
            labels.extend(lab.tolist())

        result = run_bench(found.files, schema, batch_size=5, shuffle=True, min_after_dequeue=4,
                           consume=consume)
        assert result.records == N
        assert Counter(labels) == {c: N // CLASSES for c in range(CLASSES)}, where


def test_bench_text_shows_images_per_s_and_cpu_per_image(data: Path) -> None:
    res = run("bench", str(data / "tfrecord"), "--batch-size", "8", "--no-progress",
              "--augment", "eval", "--size", "64")
    assert res.exit_code == 0, res.output
    rows = dict(line.strip().split("  ", 1) for line in res.stdout.splitlines()
                if line.startswith("  ") and "  " in line.strip())
    assert res.stdout.startswith("feedq bench: images (tfrecord)")
    assert rows["images"].strip() == f"{N}"
    assert float(rows["images/s"].strip().replace(",", "")) > 0
    assert float(rows["CPU ms per image (process)"].strip()) > 0
    assert rows["augment"].strip() == "eval: resize 73 + centre crop 64"  # not shuffled
    assert any(line.startswith("bottleneck: ") for line in res.stdout.splitlines())


def test_single_image_and_format_overrides(data: Path) -> None:
    one = next((data / "folders" / "class-001").iterdir())
    out = run_json("bench", str(one), "--no-progress")
    assert out["format"] == "images" and out["images"] == 1
    assert out["payload_bytes"] == one.stat().st_size
    # --format tfrecord reads ImageNet-layout TFRecords as records, not images
    out = run_json("bench", str(data / "tfrecord"), "--format", "tfrecord", "--no-progress")
    assert out["format"] == "tfrecord" and out["records"] == N
    out = run_json("bench", str(data / "tfrecord"), "--format", "images", "--no-progress")
    assert out["format"] == "images" and out["images"] == N
    res = CliRunner().invoke(main, ["bench", str(data / "tar" / "shard-00000.tar"), "--format",
                                    "images", "--json"])  # a tar shard is images
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["images"] == N // 2


def test_not_an_image_dataset_with_format_images(tmp_path: Path) -> None:
    from feedq.cli.datasets import make_dataset

    make_dataset(tmp_path / "csv", "csv", 10, files=1)
    res = CliRunner().invoke(main, ["bench", str(tmp_path / "csv"), "--format", "images"])
    assert res.exit_code == 2 and "not an image dataset" in res.output


@pytest.fixture
def bad_folders(data: Path, tmp_path: Path) -> Path:
    import shutil

    root = tmp_path / "bad"
    shutil.copytree(data / "folders", root)
    victim = root / "class-000" / "img-000000.jpg"
    victim.write_bytes(victim.read_bytes()[:5000])  # truncated
    (root / "class-002" / "zz-notes.jpg").write_bytes(b"not an image at all")
    return root


def test_bad_images_are_named_or_skipped_and_counted(bad_folders: Path) -> None:
    res = CliRunner().invoke(main, ["bench", str(bad_folders), "--no-progress"])
    assert res.exit_code == 1
    assert "img-000000.jpg" in res.output or "zz-notes.jpg" in res.output, res.output
    out = run_json("bench", str(bad_folders), "--on-error", "skip", "--no-progress")
    assert out["images"] == N - 1 and out["skipped_errors"] == 2


def test_inspect_tells_each_container(data: Path) -> None:
    cases = {
        "tfrecord/train-00000-of-00002": ("tfrecord", N // 2, "image/class/label"),
        "tar/shard-00001.tar": ("tar", N // 2, "cls"),
        "folders": ("folders", N, "class folders"),
    }
    for where, (container, count, label) in cases.items():
        rep = run_json("inspect", str(data / where))
        assert rep["format"] == "images" and rep["container"] == container, where
        assert rep["images"] == count and rep["labels"]["key"] == label, where
        assert rep["labels"]["classes"] == CLASSES, where
        s = rep["sample"]
        assert s["images"] == count and s["formats"] == {"jpeg": count}
        assert sum(s["channels"].values()) == count
        assert sum(s["subsampling"].values()) == count
        assert rep["bad_images"] == [] and rep["bad_in_sample"] == 0
        assert len(rep["first_images"]) == 3
    one = next((data / "folders" / "class-002").iterdir())
    rep = run_json("inspect", str(one))
    assert rep["container"] == "files" and rep["images"] == 1
    first = rep["first_images"][0]
    from feedq.image import extract_jpeg_shape

    h, w, c = extract_jpeg_shape(one.read_bytes()).tolist()
    assert (first["height"], first["width"], first["channels"]) == (h, w, c)
    assert first["bytes"] == one.stat().st_size


def test_inspect_names_bad_images(bad_folders: Path) -> None:
    rep = run_json("inspect", str(bad_folders))
    assert rep["images"] == N + 1 and rep["bad_in_sample"] == 2
    keys = sorted(Path(b["key"]).name for b in rep["bad_images"])
    assert keys == ["img-000000.jpg", "zz-notes.jpg"]
    res = run("inspect", str(bad_folders))
    assert "bad images: 2 in the sample:" in res.stdout
    assert "zz-notes.jpg: unknown image format" in res.stdout
    # --sample limits the images decoded (spread over the classes)
    rep = run_json("inspect", str(bad_folders), "--sample", "5")
    assert rep["sample"]["images"] == 5 and rep["images"] == N + 1


def test_inspect_still_reads_other_tfrecords_as_records(tmp_path: Path) -> None:
    from feedq.cli.datasets import make_dataset

    path = make_dataset(tmp_path / "t", "tfrecord", 10, files=1)[0]
    rep = run_json("inspect", path)
    assert rep["format"] == "tfrecord" and rep["records"] == 10


def test_compare_runs_tf_data_and_dataloader_on_the_same_images(data: Path) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    out = run_json("bench", str(data / "tfrecord"), "--compare", "--repeats", "1", "--batch-size", "8",
                   "--size", "64", "--no-progress")
    rows = out["compare"]
    assert [r["system"] for r in rows] == LOADERS
    for r in rows:
        assert r["status"] == "ok" and r["runs"] == 1, r
        assert r["records"] == N, r
        assert r["payload_bytes"] == encoded_bytes(data), r  # the same images
        assert r["cpu_s"] > 0 and r["records_per_s"] > 0, r
    res = run("bench", str(data / "folders"), "--compare", "--repeats", "1", "--batch-size", "8",
              "--size", "64", "--no-progress", "--augment", "eval")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("compared on the same files"))
    assert lines[start + 1].split()[:5] == ["loader", "images/s", "MB/s", "CPU", "ms/image"]
    for i, name in enumerate(LOADERS):
        assert lines[start + 2 + i].strip().startswith(name)
        assert lines[start + 2 + i].strip()[len(name):].split()[3].endswith("x")
    assert any("decode_jpeg + resize(shorter side 73) + central crop 64" in x for x in lines)
    assert any("map-style dataset over the files" in x and "CenterCrop(64)" in x for x in lines)


def test_compare_rows_say_what_is_missing_or_unsupported(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import feedq.cli._compare as compare

    monkeypatch.setattr(compare, "import_tensorflow", lambda: None)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch...` raises ImportError
    out = run_json("bench", str(data / "folders"), "--compare", "--repeats", "1", "--no-progress")
    rows = {r["system"]: r for r in out["compare"]}
    assert list(rows) == LOADERS
    assert rows["feedq"]["status"] == "ok" and rows["feedq"]["records"] == N
    assert rows["tf.data"]["status"] == "not installed (pip install tensorflow)"
    for name in LOADERS[2:]:
        assert rows[name]["status"] == "not installed (pip install torch)"
    out = run_json("bench", str(data / "tar"), "--compare", "--repeats", "1", "--no-progress")
    rows = {r["system"]: r for r in out["compare"]}
    assert rows["tf.data"]["status"] == "not supported: tf.data reads no tar shards"


def test_help_documents_images() -> None:
    res = CliRunner().invoke(main, ["bench", "--help"], terminal_width=100)
    text = " ".join(res.stdout.split())
    for words in ("--augment", "decode_random_resized_crop", "decode_resize_center_crop", "--size",
                  "image/encoded", "class folders", "CPU ms per image", "decode_and_crop_jpeg",
                  "Pillow"):
        assert words in text, words
    res = CliRunner().invoke(main, ["inspect", "--help"], terminal_width=100)
    assert "image/encoded" in " ".join(res.stdout.split())
