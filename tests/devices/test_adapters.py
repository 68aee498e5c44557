"""Framework adapters: torch IterableDataset + DataLoader, tf.data signature, CuPy, extras."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedq
from feedq.devices import MissingExtraError, as_tf_dataset, as_torch_dataset, tf_signature
from feedq.errors import FailedPreconditionError

pytestmark = pytest.mark.timeout(15)

ROOT = Path(__file__).resolve().parents[2]
# Every example that imports torch must say how to get it when it is missing.
TORCH_EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.py")
                        if "import torch" in p.read_text())
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


@pytest.fixture(autouse=True)
def _no_feeder_threads_left() -> Iterator[None]:
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith("feedq-feeder")]
    assert not left, f"feeder threads left running: {left}"


def xy_queue(n: int) -> Any:
    q = feedq.FIFOQueue(n, [np.float32, np.int64], shapes=[(3,), ()])
    q.enqueue_many([np.arange(3 * n, dtype=np.float32).reshape(n, 3), np.arange(n)])
    q.close()
    return q


def test_torch_dataloader_batch_size_none() -> None:
    torch = pytest.importorskip("torch")
    ds = as_torch_dataset(xy_queue(10), batch_size=4, allow_smaller_final_batch=True)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    got = list(torch.utils.data.DataLoader(ds, batch_size=None))
    assert [tuple(x.shape) for x, _ in got] == [(4, 3), (4, 3), (2, 3)]
    assert all(x.dtype == torch.float32 and y.dtype == torch.int64 for x, y in got)
    assert torch.cat([y for _, y in got]).tolist() == list(range(10))


def test_torch_dataset_yields_without_copy() -> None:
    torch = pytest.importorskip("torch")
    data = [np.arange(6, dtype=np.float32).reshape(2, 3) for _ in range(3)]
    ds = as_torch_dataset(data)
    got = list(ds)
    assert [t.data_ptr() for t in got] == [a.ctypes.data for a in data]
    assert len(list(ds)) == 3  # a list is re-iterable: a second epoch
    assert all(isinstance(t, torch.Tensor) for t in got)


def test_torch_dataset_refuses_worker_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    with pytest.raises(FailedPreconditionError, match="num_workers=0"):
        next(iter(as_torch_dataset([np.zeros(2)])))


def test_torch_dataset_with_replicas() -> None:
    pytest.importorskip("torch")
    ds = as_torch_dataset(xy_queue(8), batch_size=4, replicas=["cpu", "cpu"], mode="split")
    shards = list(ds)
    assert [[tuple(s[0].shape) for s in step] for step in shards] == [[(2, 3), (2, 3)]] * 2


def test_tf_signature_from_queue_dtypes_and_shapes() -> None:
    q = feedq.FIFOQueue(4, [np.float32, feedq.STRING], shapes=[(3,), ()], names=["x", "s"])
    assert tf_signature(q, 8) == {"x": (np.dtype(np.float32), (8, 3)),
                                  "s": (np.dtype(object), (8,))}
    q2 = feedq.FIFOQueue(4, [np.int32, np.float64], shapes=[(), (2, 2)])
    assert tf_signature(q2) == ((np.dtype(np.int32), (None,)),
                                (np.dtype(np.float64), (None, 2, 2)))
    q3 = feedq.FIFOQueue(4, np.uint8, shapes=[(5,)])
    assert tf_signature(q3, 2) == (np.dtype(np.uint8), (2, 5))


def test_tf_dataset_missing_extra_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(MissingExtraError, match=(
            r'^feedq\.as_tf_dataset needs tensorflow, which is not installed: '
            r'pip install "feedq\[tf\]"$')):
        as_tf_dataset(xy_queue(2), 2)


def test_tf_dataset_round_trip() -> None:
    tf = pytest.importorskip("tensorflow")
    ds = as_tf_dataset(xy_queue(6), 3)
    got = [(x.numpy(), y.numpy()) for x, y in ds]
    assert np.concatenate([y for _, y in got]).tolist() == list(range(6))
    assert ds.element_spec[0] == tf.TensorSpec((3, 3), tf.float32)


def test_cupy_missing_extra_from_feeder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(MissingExtraError, match=r'pip install "feedq\[cupy\]"$'):
        feedq.devices.DeviceFeeder([np.zeros(2)], device="cpu", output="cupy")


def test_torch_missing_extra_from_feeder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=(
            r"^DeviceFeeder\(output='torch'\) needs torch, which is not installed: "
            r'pip install "feedq\[torch\]"$')):
        feedq.devices.DeviceFeeder([np.zeros(2)], device="cpu", output="torch")


def test_missing_extra_error_for_module() -> None:
    error = MissingExtraError.for_module("torch", "my script")
    assert isinstance(error, ImportError)
    assert str(error) == 'my script needs torch, which is not installed: pip install "feedq[torch]"'
    assert str(MissingExtraError.for_module("tensorflow", "x")).endswith('"feedq[tf]"')


def test_torch_examples_are_the_expected_ones() -> None:
    assert TORCH_EXAMPLES == ["examples/devices_placement.py", "examples/images_torch_training.py",
                              "examples/torch_two_replicas.py"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", TORCH_EXAMPLES)
def test_torch_example_without_torch_prints_the_missing_extra(path: str) -> None:
    """No bare ModuleNotFoundError: feedq's message, and how to get a CPU-only torch."""
    wrapper = ("import runpy, sys\n"
               "sys.modules['torch'] = None  # from here on `import torch` raises ImportError\n"
               f"sys.argv = [{path!r}]\n"
               f"runpy.run_path({path!r}, run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", wrapper], cwd=ROOT, capture_output=True,
                          text=True, timeout=50, check=False)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f'{path} needs torch, which is not installed: pip install "feedq[torch]"\n'
        f"A CPU-only torch is enough: {CPU_TORCH}\n")


def test_every_public_name_shows_public_module() -> None:
    import feedq.devices as d

    assert d.__file__ is not None and Path(d.__file__).name == "devices.py"
    for name in d.__all__:
        if name == "ReplicaMode":  # a typing alias, not a class or function
            continue
        # MissingExtraError is re-exported from its home, feedq.errors.
        home = "feedq.errors" if name == "MissingExtraError" else "feedq.devices"
        assert getattr(d, name).__module__ == home, name
    assert feedq.Variable is d.Variable


def test_public_names_show_public_module() -> None:
    import feedq.devices as d

    assert sorted(d.__all__) == d.__all__
    for name in ["DeviceFeeder", "DeviceSpec", "DeviceConfig", "device",
                 "list_devices", "as_torch_dataset"]:
        assert getattr(d, name).__module__ == "feedq.devices"
    # Re-exported from its public home, feedq.errors (readers raise it too).
    assert d.MissingExtraError.__module__ == "feedq.errors"


def test_to_torch_is_zero_copy_and_keeps_structure() -> None:
    torch = pytest.importorskip("torch")
    import feedq

    q = feedq.FIFOQueue(8, [np.float32, str], shapes=[[2], []], names=["x", "s"])
    q.enqueue_many({"x": np.ones((2, 2), np.float32), "s": ["a", "b"]})
    batch = q.dequeue_many(2)
    out = feedq.to_torch(batch)
    assert isinstance(out["x"], torch.Tensor) and out["s"] is batch["s"]
    out["x"][0, 0] = 5.0
    assert batch["x"][0, 0] == 5.0  # shares memory with the dequeued array
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    t = feedq.to_torch([ro])[0]
    assert t.shape == (3,) and not np.shares_memory(t.numpy(), ro)
