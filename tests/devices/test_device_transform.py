"""DeviceFeeder(device_transform=) and feedq.image.ToDeviceFloat, on the CPU.

uint8 NHWC batches are staged and copied as uint8 (``bytes_copied`` counts
one byte per value), and each replica's copy is turned into normalised float
NCHW where it arrived. The results are compared exactly with the torch
expression the docs give; a transform's error reaches the consumer after the
batches before it, naming the component, and the batch it failed on comes
again after a restore. The CUDA stream path is checked with CUDA's calls
faked here, and for real in ``test_gpu.py``.
"""

from __future__ import annotations

import contextlib
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._devices import placement as _placement
from feedq.devices import DeviceConfig, DeviceFeeder, set_device_config
from feedq.errors import InvalidArgumentError
from feedq.image import ToDeviceFloat
from tests.conftest import wait_until

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(15)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
N, H, W = 6, 5, 7
BATCHES = 5


@pytest.fixture(autouse=True)
def _no_feeder_threads_left() -> Iterator[None]:
    previous = set_device_config(DeviceConfig())
    yield
    set_device_config(previous)
    left = [t.name for t in threading.enumerate() if t.name.startswith("feedq-feeder")]
    assert not left, f"feeder threads left running: {left}"


def images(i: int) -> np.ndarray:
    """Batch i's uint8 NHWC images; pixel [0, 0, 0, 0] is i (its tag)."""
    x = np.random.default_rng(i).integers(0, 256, (N, H, W, 3), dtype=np.uint8)
    x[0, 0, 0, 0] = i
    return x


def reference(x: np.ndarray, dtype: Any = torch.float32) -> Any:
    """The documented formula, as a torch user would write it."""
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    y = (torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255 - mean) / std
    return y.to(dtype)


class ImageList:
    """A resumable source in miniature (``taken``, ``state_dict(upto=)``,
    ``load_state_dict``): batches ``{"image": images(i), "label": i}``."""

    def __init__(self, n: int = BATCHES) -> None:
        self.n = n
        self.start = 0
        self._taken = 0
        self._lock = threading.Lock()

    @property
    def taken(self) -> int:
        with self._lock:
            return self._taken

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        while True:
            with self._lock:
                i = self.start + self._taken
                if i >= self.n:
                    return
                self._taken += 1
            yield {"image": images(i), "label": np.full(N, i, np.int64)}

    def state_dict(self, upto: int | None = None) -> dict[str, Any]:
        with self._lock:
            return {"pos": self.start + (self._taken if upto is None else upto)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.start = int(state["pos"])


def split_rows(i: int, replicas: int) -> list[np.ndarray]:
    return np.array_split(images(i), replicas)


# -- the transform, per replica -------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("staging", [False, True], ids=["host", "staged"])
@pytest.mark.parametrize("mode", ["split", "broadcast", "round_robin"])
def test_each_replica_gets_the_normalised_nchw_float_of_its_rows(
        dtype: Any, staging: bool, mode: str) -> None:
    to_float = ToDeviceFloat(mean=MEAN, std=STD, dtype=dtype)
    feeder = DeviceFeeder(ImageList(), replicas=["cpu", "cpu"], mode=mode, staging=staging,
                          output="torch", device_transform={"image": to_float})
    with feeder:
        got = list(feeder)
    assert len(got) == BATCHES
    for i, item in enumerate(got):
        if mode == "split":
            expected = [(r, x) for r, x in enumerate(split_rows(i, 2))]
            shards = list(enumerate(item))
        elif mode == "broadcast":
            expected = [(0, images(i)), (1, images(i))]
            shards = list(enumerate(item))
        else:
            expected, shards = [(i % 2, images(i))], [item]
        assert [r for r, _ in shards] == [r for r, _ in expected]
        for (_, shard), (_, x) in zip(shards, expected):
            y = shard["image"]
            assert y.dtype == dtype and y.shape == (len(x), 3, H, W) and y.is_contiguous()
            assert torch.equal(y, reference(x, dtype))
            assert shard["label"].dtype == torch.int64  # untouched
            assert shard["label"].tolist() == [i] * len(x)
    stats = feeder.statistics()
    assert (stats.batches_read, stats.batches_delivered, stats.rows_delivered) == (
        BATCHES, BATCHES, BATCHES * N)


def test_host_memory_and_the_copy_stay_uint8() -> None:
    """Staged: the slots hold uint8, and the copy engine moves one byte per
    image value (plus the labels), per replica; the consumer gets float32."""
    feeder = DeviceFeeder(ImageList(), replicas=["cpu", "cpu"], mode="broadcast",
                          staging=True, output="torch",
                          device_transform={"image": ToDeviceFloat(MEAN, STD)})
    with feeder:
        got = list(feeder)
        slot_dtypes = {h.dtype for slot in feeder._feed.slots for h in slot.host[:1]}
    assert slot_dtypes == {np.dtype(np.uint8)}
    assert {shard["image"].dtype for item in got for shard in item} == {torch.float32}
    per_batch = N * H * W * 3 + N * 8  # uint8 images + int64 labels
    assert feeder.statistics().bytes_copied == BATCHES * 2 * per_batch
    # Without the transform the same bytes move: the transform is after the copy.
    plain = DeviceFeeder(ImageList(), replicas=["cpu", "cpu"], mode="broadcast", staging=True)
    with plain:
        list(plain)
    assert plain.statistics().bytes_copied == BATCHES * 2 * per_batch


def test_nothing_is_copied_on_an_unstaged_host_feeder() -> None:
    feeder = DeviceFeeder(ImageList(), device="cpu", output="torch",
                          device_transform={"image": ToDeviceFloat(MEAN, STD)})
    with feeder:
        got = list(feeder)
    assert feeder.statistics().bytes_copied == 0
    assert torch.equal(got[2]["image"], reference(images(2)))


def test_on_the_host_engine_the_transform_sees_the_finished_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The host engine's copies run later on its copy thread; a copy held back
    there must hold the transform back too (else it would read an empty buffer)."""
    from feedq._devices.engines import HostEngine

    gate = threading.Event()
    real_copy = HostEngine._copy

    def gated_copy(self: HostEngine, dst: np.ndarray, src: np.ndarray) -> None:
        gate.wait(10)
        real_copy(self, dst, src)

    monkeypatch.setattr(HostEngine, "_copy", gated_copy)
    seen: list[int] = []

    def tag_of(x: Any) -> Any:
        seen.append(int(x[0, 0, 0, 0]))
        return x.clone()

    feeder = DeviceFeeder(ImageList(2), device="cpu", staging=True, output="torch",
                          device_transform={"image": tag_of})
    try:
        with feeder:
            feeder.start()
            wait_until(lambda: feeder.statistics().batches_read == 1, 5, "the first read")
            assert seen == []  # the transform waits for the gated copy
            gate.set()
            got = [b["image"][0, 0, 0, 0].item() for b in feeder]
    finally:
        gate.set()  # a failure above must not leave the copy thread waiting
    # Had the transform run before its copy, it would have seen the empty buffer.
    assert seen == got == [0, 1]


def test_a_bare_batch_takes_one_callable_and_numpy_output_works() -> None:
    to_float = ToDeviceFloat(MEAN, STD, dtype="float16", layout="NHWC")
    feeder = DeviceFeeder([images(0), images(1)], device="cpu", staging=True, output="numpy",
                          device_transform=to_float)
    with feeder:
        got = list(feeder)
    for i, y in enumerate(got):
        assert isinstance(y, np.ndarray) and y.dtype == np.float16
        assert y.shape == (N, H, W, 3) and y.flags.c_contiguous
        expected = reference(images(i), torch.float16).permute(0, 2, 3, 1).numpy()
        assert np.array_equal(y, expected)


def test_a_list_batch_maps_transforms_by_index() -> None:
    feeder = DeviceFeeder([[images(0), np.arange(N)]], device="cpu", output="torch",
                          device_transform={0: ToDeviceFloat(MEAN, STD)})
    with feeder:
        (batch,) = list(feeder)
    assert torch.equal(batch[0], reference(images(0))) and batch[1].tolist() == list(range(N))


# -- errors -------------------------------------------------------------------


def failing_on(bad: int) -> Any:
    to_float = ToDeviceFloat(MEAN, STD)

    def transform(x: Any) -> Any:
        if int(x[0, 0, 0, 0]) == bad:
            raise RuntimeError(f"cannot convert batch {bad}")
        return to_float(x)
    return transform


@pytest.mark.parametrize("staging", [False, True], ids=["host", "staged"])
def test_a_transform_error_reaches_the_consumer_after_the_batches_before_it(
        staging: bool) -> None:
    source = ImageList()
    feeder = DeviceFeeder(source, device="cpu", staging=staging, output="torch",
                          prefetch=2, name="imgs", device_transform={"image": failing_on(2)})
    with feeder:
        got = [feeder.get(timeout=10)["label"][0].item() for _ in range(2)]
        with pytest.raises(RuntimeError, match=r"^cannot convert batch 2\n") as info:
            feeder.get(timeout=10)
        assert info.value.__notes__ == [
            "imgs: in the device_transform of component 'image' (replica 0, on cpu), "
            "batch 2 of the feeder"]
        with pytest.raises(RuntimeError, match="cannot convert batch 2"):
            feeder.get(timeout=10)  # stays failed
        stats = feeder.statistics()
        # Exact accounting: two delivered, the failed one read but not delivered,
        # nothing read after it.
        assert (stats.batches_read, stats.batches_delivered, stats.rows_delivered) == (3, 2, 2 * N)
        assert source.taken == 3
        state = pickle.loads(pickle.dumps(feeder.state_dict()))
    assert got == [0, 1] and state == {"pos": 2}
    # Restored, the failed batch comes again (a fixed transform converts it), once.
    source = ImageList()
    feeder = DeviceFeeder(source, device="cpu", staging=staging, output="torch",
                          device_transform={"image": ToDeviceFloat(MEAN, STD)})
    feeder.load_state_dict(state)
    with feeder:
        rest = list(feeder)
    assert [b["label"][0].item() for b in rest] == [2, 3, 4]
    assert all(torch.equal(b["image"], reference(images(i)))
               for b, i in zip(rest, [2, 3, 4]))


def test_a_batch_that_is_not_uint8_nhwc_is_named() -> None:
    feeder = DeviceFeeder([{"image": np.zeros((2, 4, 4, 3), np.float32)}], device="cpu",
                          output="torch", name="f",
                          device_transform={"image": ToDeviceFloat(MEAN, STD)})
    with feeder, pytest.raises(
            InvalidArgumentError,
            match=r"^ToDeviceFloat takes uint8 images \[n, h, w, 3\], got float32 \[2, 4, 4, 3\]\n"
    ) as info:
        feeder.get(timeout=10)
    assert "component 'image'" in info.value.__notes__[0]


@pytest.mark.parametrize("source, transform, error, match", [
    ([{"image": images(0)}], {"img": ToDeviceFloat(MEAN, STD)}, InvalidArgumentError,
     r"^f: device_transform names \['img'\], not components of the batch \['image'\]$"),
    ([{"image": images(0)}], ToDeviceFloat(MEAN, STD), InvalidArgumentError,
     r"^f: device_transform is one callable but the batch has components \['image'\]"),
])
def test_a_transform_that_does_not_fit_the_batch_is_refused(
        source: Any, transform: Any, error: type[Exception], match: str) -> None:
    feeder = DeviceFeeder(source, device="cpu", name="f", device_transform=transform)
    with feeder, pytest.raises(error, match=match):
        feeder.get(timeout=10)


def test_a_queue_feeder_checks_its_transform_at_creation() -> None:
    q = feedq.FIFOQueue(4, [np.uint8, np.int64], shapes=[(H, W, 3), ()], names=["image", "y"])
    with pytest.raises(InvalidArgumentError, match=r"names \['x'\]"):
        DeviceFeeder(q, 2, device="cpu", name="f", device_transform={"x": abs})
    with pytest.raises(TypeError, match="device_transform must be a callable"):
        DeviceFeeder(q, 2, device="cpu", device_transform={"image": 3})


@pytest.mark.parametrize("kwargs, match", [
    ({"layout": "CHW"}, r"^ToDeviceFloat: layout must be 'NCHW' or 'NHWC', got 'CHW'$"),
    ({"dtype": "int8"}, r"^ToDeviceFloat: dtype must be float32 or float16, got 'int8'$"),
    ({"std": (1.0, 0.0, 1.0)}, r"^ToDeviceFloat: std must not be 0"),
    ({"std": (1.0, 1.0)}, r"^ToDeviceFloat: mean and std need one value per channel, got \[3\] and \[2\]$"),
])
def test_to_device_float_arguments(kwargs: dict[str, Any], match: str) -> None:
    args = {"mean": MEAN, "std": STD, **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        ToDeviceFloat(**args)


def test_to_device_float_dtypes_by_any_name() -> None:
    for dtype in (torch.float16, np.float16, "float16", "half", "torch.float16"):
        assert ToDeviceFloat(MEAN, STD, dtype=dtype).dtype == "float16"
    with pytest.raises(TypeError, match="takes a torch tensor or a NumPy array, got list"):
        ToDeviceFloat(MEAN, STD)([[1]])


def test_to_device_float_pickles() -> None:
    to_float = ToDeviceFloat(MEAN, STD, dtype=torch.float16)
    to_float(torch.from_numpy(images(0)))  # builds its cached constants
    again = pickle.loads(pickle.dumps(to_float))
    assert repr(again) == repr(to_float)
    assert torch.equal(again(torch.from_numpy(images(1))), reference(images(1), torch.float16))


def test_to_device_float_never_imports_torch() -> None:
    """On NumPy arrays it works without torch (the layer rule, checked by
    lint-imports, keeps feedq.image from importing the devices layer)."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, feedq.image; "
            "y = feedq.image.ToDeviceFloat((0.5,), (0.25,))(np.full((1, 1, 2, 1), 255, np.uint8)); "
            "print(y.ravel().tolist(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[2.0, 2.0] False"


# -- the CUDA engine's stream, faked ------------------------------------------------


def test_on_cuda_the_transform_runs_on_the_copy_stream_before_the_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The real CudaEngine with CUDA's calls faked: the transform is issued
    while the device's side stream is current, after its copy, and the event
    the consumer waits on is recorded after it."""
    probe = _placement._GpuProbe(2, None, ("Fake", "Fake"), (2**30, 2**30))
    monkeypatch.setattr(_placement, "_probe", lambda: probe)
    log: list[tuple[str, Any]] = []
    active: list[Any] = [None]

    class Stream:
        def __init__(self, device: Any = None) -> None:
            self.device = device

        def wait_event(self, event: Any) -> None:
            log.append(("wait", event.stream.device))

    class Event:
        stream: Any = None

        def record(self, stream: Any) -> None:
            self.stream = stream
            log.append(("record", stream.device))

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            pass

    @contextlib.contextmanager
    def stream_context(stream: Any) -> Iterator[None]:
        before, active[0] = active[0], stream
        try:
            yield
        finally:
            active[0] = before

    consumer = {0: Stream(0), 1: Stream(1)}
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", stream_context)
    monkeypatch.setattr(torch.cuda, "device", lambda i: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda i: consumer[i])
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    real_empty = torch.empty

    def fake_empty(*shape: Any, dtype: Any = None, pin_memory: bool = False,
                   device: Any = None) -> Any:
        if isinstance(device, str) and device.startswith("cuda"):  # a copy's destination
            log.append(("copy", active[0].device))
        return real_empty(*shape, dtype=dtype)

    monkeypatch.setattr(torch, "empty", fake_empty)
    to_float = ToDeviceFloat(MEAN, STD)

    def on_side_stream(x: Any) -> Any:
        stream = active[0]
        assert stream is not None and stream is not consumer[stream.device]
        log.append(("transform", stream.device))
        return to_float(x)

    q = feedq.FIFOQueue(8, [np.uint8], shapes=[(H, W, 3)])
    q.enqueue_many([np.concatenate([images(0), images(1)])[:8]])
    q.close()
    feeder = DeviceFeeder(q, 4, replicas=["cuda:0", "cuda:1"], mode="split", prefetch=1,
                          device_transform=on_side_stream)
    with feeder:
        got = list(feeder)
    rows = np.concatenate([images(0), images(1)])[:8]
    assert [[s.shape for s in step] for step in got] == [[(2, 3, H, W)] * 2] * 2
    assert torch.equal(torch.cat([s for step in got for s in step]), reference(rows))
    # The feeder thread's calls, in order (the consumer's waits interleave with them).
    batch = [("copy", 0), ("copy", 1), ("transform", 0), ("transform", 1),
             ("record", 0), ("record", 1)]
    assert [e for e in log if e[0] != "wait"] == batch * 2
    assert sorted(e for e in log if e[0] == "wait") == [("wait", 0)] * 2 + [("wait", 1)] * 2
    assert feeder.statistics().bytes_copied == 8 * H * W * 3
