"""DeviceFeeder and placement on real CUDA devices; skipped on machines without one.

Run on a GPU machine with ``pytest -m gpu tests/devices/test_gpu.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._devices import placement as _placement
from feedq.devices import (
    DeviceConfig,
    DeviceFeeder,
    PlacementRequest,
    list_devices,
    place,
    set_device_config,
)

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timeout(60),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    _placement._probe.cache_clear()
    previous = set_device_config(DeviceConfig())
    yield
    set_device_config(previous)
    left = [t.name for t in threading.enumerate() if t.name.startswith("feedq-feeder")]
    assert not left, f"feeder threads left running: {left}"


def queue_of(n: int, dim: int = 1024) -> Any:
    q = feedq.FIFOQueue(n, [np.float32, np.int64], shapes=[(dim,), ()])
    x = np.repeat(np.arange(n, dtype=np.float32)[:, None], dim, axis=1)
    q.enqueue_many([x, np.arange(n)])
    q.close()
    return q


def test_list_devices_sees_the_gpus() -> None:
    listing = list_devices()
    gpus = [d for d in listing if d.device_type == "GPU"]
    assert len(gpus) == torch.cuda.device_count()
    assert gpus[0].torch_device == "cuda:0" and gpus[0].memory_bytes > 0


def test_feeder_delivers_in_order_through_pinned_slots() -> None:
    n, batch = 512, 16
    feeder = DeviceFeeder(queue_of(n), batch, device="cuda:0", prefetch=2)
    seen = []
    with feeder:
        for x, y in feeder:
            assert x.is_cuda and y.is_cuda and x.device.index == 0
            # Work on the consumer's stream right away: it waits for the copy event.
            seen.append(torch.stack([x[:, 0].to(torch.int64), y]).cpu())
        assert all(p.is_pinned() for slot in feeder._feed.slots for p in slot.pinned)
        assert len(feeder._feed.slots) == 3
    got = torch.cat(seen, dim=1)
    assert got[0].tolist() == list(range(n)) and got[1].tolist() == list(range(n))
    stats = feeder.statistics()
    assert stats.batches_delivered == n // batch and stats.rows_delivered == n


def test_slow_consumer_stream_gets_right_data() -> None:
    """The consumer's stream is busy when batches arrive; copies must not race it."""
    feeder = DeviceFeeder(queue_of(256, 4096), 8, device="cuda:0", prefetch=3)
    total = 0.0
    with feeder:
        for x, y in feeder:
            torch.cuda._sleep(2_000_000)  # keep the consumer's stream busy
            total += float((x[:, 0] - y.to(torch.float32)).abs().sum())
    assert total == 0.0


@pytest.mark.parametrize("mode", ["split", "round_robin", "broadcast"])
def test_replica_modes_on_gpus(mode: str) -> None:
    count = torch.cuda.device_count()
    devices = [f"cuda:{i % count}" for i in range(2)]
    feeder = DeviceFeeder(queue_of(64), 8, replicas=devices, mode=mode)
    rows = []
    with feeder:
        for item in feeder:
            if mode == "round_robin":
                r, (x, y) = item
                assert y.device == torch.device(devices[r])
                rows += y.cpu().tolist()
            else:
                for r, (_x, y) in enumerate(item):
                    assert y.device == torch.device(devices[r])
                    rows += y.cpu().tolist()
    if mode == "broadcast":
        assert sorted(rows) == sorted(list(range(64)) * 2)
    else:
        assert rows == list(range(64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
def test_device_transform_runs_on_the_copy_stream_and_the_consumer_sees_it_done(
        dtype: Any) -> None:
    """uint8 NHWC staged and copied, normalised on the GPU on the copy stream:
    a consumer whose stream is busy still reads finished values (it waits on
    the event recorded after the transform), equal to the formula computed
    on the same device."""
    from feedq.image import ToDeviceFloat

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rng = np.random.default_rng(0)
    host = [rng.integers(0, 256, (8, 32, 48, 3), dtype=np.uint8) for _ in range(6)]
    to_float = ToDeviceFloat(mean, std, dtype=dtype)
    feeder = DeviceFeeder([{"image": x, "label": np.arange(8)} for x in host], device="cuda:0",
                          prefetch=2, device_transform={"image": to_float})
    m = torch.tensor(mean, device="cuda:0").view(1, 3, 1, 1)
    s = torch.tensor(std, device="cuda:0").view(1, 3, 1, 1)
    with feeder:
        for x, batch in zip(host, feeder):
            torch.cuda._sleep(2_000_000)  # keep the consumer's stream busy
            y = batch["image"]
            assert y.is_cuda and y.dtype == dtype and y.shape == (8, 3, 32, 48)
            ref = ((torch.from_numpy(x).cuda().permute(0, 3, 1, 2).float() / 255 - m) / s)
            assert torch.equal(y, ref.to(dtype))
        assert {h.dtype for slot in feeder._feed.slots for h in slot.host[:1]} == {np.dtype(np.uint8)}
    stats = feeder.statistics()
    assert stats.batches_delivered == 6
    assert stats.bytes_copied == 6 * (8 * 32 * 48 * 3 + 8 * 8)


def test_string_component_soft_placed_on_host(caplog: pytest.LogCaptureFixture) -> None:
    set_device_config(DeviceConfig(allow_soft_placement=True))
    q = feedq.FIFOQueue(8, [np.float32, feedq.STRING], shapes=[(), ()], names=["x", "s"])
    q.enqueue_many({"x": np.arange(8, dtype=np.float32), "s": [b"%d" % i for i in range(8)]})
    q.close()
    with caplog.at_level(logging.WARNING, logger="feedq.devices"), \
            DeviceFeeder(q, 4, device="cuda:0", name="f") as feeder:
        got = list(feeder)
    assert got[0]["x"].is_cuda and got[1]["s"].tolist() == [b"4", b"5", b"6", b"7"]
    assert "f/s: (DeviceFeeder)" in caplog.records[0].getMessage()


def test_index_past_visible_count_soft_placement() -> None:
    count = torch.cuda.device_count()
    request = PlacementRequest("v", "Variable", (np.dtype(np.int32),), f"/gpu:{count}")
    with pytest.raises(feedq.errors.InvalidArgumentError, match="does not exist"):
        place(request)
    assert place(request, DeviceConfig(allow_soft_placement=True)).torch_device == "cpu"


def test_memory_fraction_limits_torch() -> None:
    set_device_config(DeviceConfig(gpu_memory_fraction=0.05))
    place(PlacementRequest("m", "DeviceFeeder", device="cuda:0"))
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda:0")
    set_device_config(DeviceConfig())  # lifts the limit at the next placement
    place(PlacementRequest("m", "DeviceFeeder", device="cuda:0"))
    block = torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda:0")
    assert block.numel() == int(total * 0.2)
    del block
    torch.cuda.empty_cache()


def test_cupy_output_through_dlpack() -> None:
    cupy = pytest.importorskip("cupy")
    with DeviceFeeder(queue_of(4), 4, device="cuda:0", output="cupy") as feeder:
        (x, y), = list(feeder)
    assert isinstance(x, cupy.ndarray) and y.tolist() == [0, 1, 2, 3]


# -- tensors PyTorch creates inside feedq.device() ---------------------------------------


def test_tensors_modules_and_variables_land_on_the_gpu(caplog: pytest.LogCaptureFixture) -> None:
    set_device_config(DeviceConfig(log_device_placement=True))
    with caplog.at_level(logging.INFO, logger="feedq.devices"), feedq.device("/gpu:0"):
        x = torch.zeros(2, 3)
        t = torch.tensor([1, 2])
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        i = feedq.Variable(3, name="i")  # TF1 had no integer GPU kernel; torch holds it
    tensors = [x, t, i, *model.parameters(), *model.buffers()]
    assert {str(v.device) for v in tensors} == {"cuda:0"}
    assert model(x).is_cuda and torch.zeros(1).device.type == "cpu"  # only inside the block
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "tensor zeros float32[2, 3]: /job:localhost/replica:0/task:0/device:GPU:0 [cuda:0]"
    assert lines[-1] == ("parameter 'i' (Variable) int64[]: "
                         "/job:localhost/replica:0/task:0/device:GPU:0 [cuda:0]")


def test_tensor_past_the_visible_gpus_soft_placed() -> None:
    count = torch.cuda.device_count()
    with feedq.device(f"cuda:{count}"), pytest.raises(feedq.errors.InvalidArgumentError,
                                                      match="does not exist"):
        torch.ones(2)
    set_device_config(DeviceConfig(allow_soft_placement=True))
    with feedq.device(f"cuda:{count}"):
        assert torch.ones(2).device.type == "cpu"
    with feedq.device("cuda:0"):
        names = feedq.Variable(["a"])  # strings: host memory even here
    assert names.device == "cpu"


def test_visible_devices_pick_the_physical_gpu() -> None:
    last = torch.cuda.device_count() - 1
    set_device_config(DeviceConfig(visible_devices=[last]))
    with feedq.device("/gpu:0"):
        x = torch.empty(4)
    assert str(x.device) == f"cuda:{last}"
