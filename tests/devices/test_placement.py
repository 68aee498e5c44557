"""Device names, contexts, the placer, soft placement, config and list_devices (CPU only).

GPU machines are modelled by replacing the placer's CUDA probe, so the
placement rules for GPUs (visible devices, indices, dtypes, memory fraction)
are tested here without CUDA; tests/devices/test_gpu.py checks them on a GPU.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import feedq
from feedq._devices import placement as _placement
from feedq.devices import (
    DeviceConfig,
    DeviceSpec,
    MissingExtraError,
    PlacementRequest,
    current_device,
    device,
    get_device_config,
    list_devices,
    place,
    set_device_config,
)
from feedq.errors import FailedPreconditionError, InvalidArgumentError

pytestmark = pytest.mark.timeout(10)

LOCAL = "/job:localhost/replica:0/task:0"


@pytest.fixture(autouse=True)
def _restore_config() -> Iterator[None]:
    previous = set_device_config(DeviceConfig())
    yield
    set_device_config(previous)


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pretends CUDA sees ``n`` GPUs; returns a setter."""

    def set_count(n: int) -> None:
        probe = _placement._GpuProbe(n, None if n else "no GPU (test)",
                                     tuple(f"FakeGPU {i}" for i in range(n)),
                                     tuple(16 * 2**30 for _ in range(n)))
        monkeypatch.setattr(_placement, "_probe", lambda: probe)

    set_count(2)
    return set_count


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _placement._GpuProbe(0, "torch 2.13.0+cpu is a CPU-only build")
    monkeypatch.setattr(_placement, "_probe", lambda: probe)


def req(name: str = "s", type_: str = "DeviceFeeder", dtypes: tuple[Any, ...] = (),
        device_: str = "") -> PlacementRequest:
    return PlacementRequest(name, type_, tuple(np.dtype(d) for d in dtypes), device_)


# -- DeviceSpec --------------------------------------------------------------


@pytest.mark.parametrize("name, expected", [
    ("/cpu:0", DeviceSpec(device_type="CPU", device_index=0)),
    ("/gpu:1", DeviceSpec(device_type="GPU", device_index=1)),
    ("/GPU:1", DeviceSpec(device_type="GPU", device_index=1)),
    ("/device:GPU:1", DeviceSpec(device_type="GPU", device_index=1)),
    ("/device:CPU:*", DeviceSpec(device_type="CPU")),
    ("/device:GPU", DeviceSpec(device_type="GPU")),
    ("/job:worker/task:0/gpu:1", DeviceSpec("worker", None, 0, "GPU", 1)),
    ("/job:ps/task:0", DeviceSpec(job="ps", task=0)),
    ("/job:worker/replica:2/task:1/device:GPU:0", DeviceSpec("worker", 2, 1, "GPU", 0)),
    ("cpu", DeviceSpec(device_type="CPU")),
    ("cuda", DeviceSpec(device_type="GPU")),
    ("cuda:1", DeviceSpec(device_type="GPU", device_index=1)),
    ("GPU:0", DeviceSpec(device_type="GPU", device_index=0)),
    ("", DeviceSpec()),
])
def test_parse_forms(name: str, expected: DeviceSpec) -> None:
    assert DeviceSpec.from_string(name) == expected


@pytest.mark.parametrize("name", ["/gpu:x", "/job:", "/foo:1", "cuda:-1", "/gpu:0/cpu:0",
                                  "/job:a/job:b", "cuda:1:2", "/task:-1"])
def test_parse_rejects(name: str) -> None:
    with pytest.raises(ValueError):
        DeviceSpec.from_string(name)


def test_torch_device_and_spec_objects_parse() -> None:
    torch = pytest.importorskip("torch")
    assert DeviceSpec.parse(torch.device("cuda", 3)) == DeviceSpec(device_type="GPU",
                                                                   device_index=3)
    spec = DeviceSpec(device_type="CPU", device_index=0)
    assert DeviceSpec.parse(spec) is spec
    assert DeviceSpec.parse(None) == DeviceSpec()
    with pytest.raises(TypeError):
        DeviceSpec.parse(3)


def test_to_string_round_trips_and_names() -> None:
    for name in ["/job:worker/replica:0/task:1/device:GPU:2", "/device:CPU:0", "/job:ps/task:0",
                 "/device:GPU:*"]:
        assert DeviceSpec.from_string(name).to_string() == name
    assert DeviceSpec.from_string("/gpu:2").torch_name == "cuda:2"
    assert DeviceSpec.from_string("/cpu:0").torch_name == "cpu"
    assert str(DeviceSpec.from_string("cuda:1")) == "/device:GPU:1"
    with pytest.raises(ValueError):
        DeviceSpec(device_index=-1)


def test_merge_inner_fields_win_unspecified_inherited() -> None:
    outer = DeviceSpec.from_string("/job:worker/task:1/gpu:0")
    assert outer.make_merged_spec(DeviceSpec.from_string("/gpu:1")).to_string() == \
        "/job:worker/task:1/device:GPU:1"
    assert outer.make_merged_spec(DeviceSpec.from_string("/task:3")).to_string() == \
        "/job:worker/task:3/device:GPU:0"
    # Documented difference from TF1: a new type without an index drops the old index.
    assert outer.make_merged_spec(DeviceSpec.from_string("cpu")).to_string() == \
        "/job:worker/task:1/device:CPU:*"
    assert outer.make_merged_spec(DeviceSpec.from_string("/device:GPU")).device_index == 0


# -- contexts ----------------------------------------------------------------


def test_nested_contexts_merge_like_tf() -> None:
    assert current_device() == DeviceSpec()
    with device("/job:worker/task:0"):
        with device("/gpu:1"):
            assert current_device().to_string() == "/job:worker/task:0/device:GPU:1"
            with device("cuda:0"):
                assert current_device().to_string() == "/job:worker/task:0/device:GPU:0"
            with device(None):
                assert current_device() == DeviceSpec()
                with device("/cpu:0"):
                    assert current_device().to_string() == "/device:CPU:0"
        assert current_device().to_string() == "/job:worker/task:0"
    assert current_device() == DeviceSpec()


def test_stage_device_argument_is_innermost() -> None:
    with device("/job:worker/gpu:1"):
        assert current_device(req(device_="/cpu:0")).to_string() == "/job:worker/device:CPU:0"


def test_bad_name_fails_on_entry() -> None:
    with pytest.raises(ValueError), device("/gpu:zero"):
        pass  # pragma: no cover
    assert current_device() == DeviceSpec()


def test_context_stack_is_per_thread() -> None:
    seen: list[DeviceSpec] = []
    with device("/gpu:1"):
        thread = threading.Thread(target=lambda: seen.append(current_device()),
                                  name="test-devices-ctx")
        thread.start()
        thread.join(5)
    assert seen == [DeviceSpec()]


def test_device_function_dynamic_placement() -> None:
    """The seed's variables_on_cpu: the function sees the stage and decides."""
    calls: list[PlacementRequest] = []

    def variables_on_cpu(op: PlacementRequest) -> str:
        calls.append(op)
        return "/cpu:0" if op.type == "Variable" else "/gpu:0"

    with device(variables_on_cpu):
        assert current_device(req("a", "Variable")).to_string() == "/device:CPU:0"
        assert current_device(req("c", "Mul")).to_string() == "/device:GPU:0"
    assert [c.name for c in calls] == ["a", "c"]


def test_device_function_sees_inner_choice_and_outer_names_fill_in() -> None:
    def keep_or_gpu(op: PlacementRequest) -> Any:
        return op.device or DeviceSpec(device_type="GPU", device_index=1)

    with device("/job:worker/task:2"):
        with device(keep_or_gpu):
            assert current_device(req()).to_string() == "/job:worker/task:2/device:GPU:1"
            with device("/cpu:0"):
                assert current_device(req()).to_string() == "/job:worker/task:2/device:CPU:0"
        with device(lambda op: None):
            assert current_device(req()).to_string() == "/job:worker/task:2"


# -- config ------------------------------------------------------------------


def test_config_validation() -> None:
    with pytest.raises(ValueError, match=r"^gpu_memory_fraction must be in \(0, 1\], got 0$"):
        DeviceConfig(gpu_memory_fraction=0)
    with pytest.raises(ValueError):
        DeviceConfig(gpu_memory_fraction=1.5)
    with pytest.raises(ValueError):
        DeviceConfig(visible_devices="0,x")
    with pytest.raises(ValueError):
        DeviceConfig(visible_devices=[0, 0])
    with pytest.raises(ValueError):
        DeviceConfig(operation_timeout=-1)
    assert DeviceConfig(visible_devices="1, 0").visible_devices == (1, 0)
    with pytest.raises(TypeError):
        set_device_config({"allow_soft_placement": True})  # type: ignore[arg-type]


def test_operation_timeout_sets_default_timeout() -> None:
    previous = set_device_config(DeviceConfig(operation_timeout=1.5))
    assert feedq.get_default_timeout() == 1.5
    assert get_device_config().operation_timeout == 1.5
    set_device_config(DeviceConfig(operation_timeout=math.inf))
    assert feedq.get_default_timeout() is None
    set_device_config(DeviceConfig(operation_timeout=2))
    set_device_config(DeviceConfig())  # None leaves the default alone
    assert feedq.get_default_timeout() == 2
    set_device_config(previous)


def test_operation_timeout_bounds_a_queue_dequeue() -> None:
    q = feedq.FIFOQueue(2, np.int32)
    set_device_config(DeviceConfig(operation_timeout=0.01))
    with pytest.raises(feedq.errors.DeadlineExceededError):
        q.dequeue()


# -- placer ------------------------------------------------------------------


def test_cpu_placement_logged(caplog: pytest.LogCaptureFixture, no_gpu: None) -> None:
    config = DeviceConfig(log_device_placement=True)
    with caplog.at_level(logging.INFO, logger="feedq.devices"), device("/cpu:0"):
        p = place(req("a", "Variable", (np.float32,)), config)
    assert p.device.to_string() == f"{LOCAL}/device:CPU:0"
    assert p.torch_device == "cpu" and not p.soft and not p.is_gpu
    assert [r.getMessage() for r in caplog.records] == [
        f"a: (Variable): {LOCAL}/device:CPU:0 [cpu]"]
    assert caplog.records[0].levelno == logging.INFO


def test_no_log_without_log_device_placement(caplog: pytest.LogCaptureFixture,
                                             no_gpu: None) -> None:
    with caplog.at_level(logging.DEBUG, logger="feedq.devices"):
        place(req(device_="/cpu:0"))
    assert caplog.records == []


def test_gpu_without_cuda_is_invalid_argument(no_gpu: None) -> None:
    with device("/gpu:0"), pytest.raises(InvalidArgumentError, match=(
            r"^Cannot assign a device for stage 'i' \(Variable\): could not satisfy device "
            r"specification '/device:GPU:0': no GPU is visible: torch 2\.13\.0\+cpu is a "
            r"CPU-only build\. Set allow_soft_placement=True in feedq\.DeviceConfig to fall "
            r"back to /device:CPU:0$")):
        place(req("i", "Variable", (np.int32,)))


def test_soft_placement_falls_back_with_logged_reason(caplog: pytest.LogCaptureFixture,
                                                      no_gpu: None) -> None:
    """The seed's integer variable on /gpu:0 under allow_soft_placement."""
    set_device_config(DeviceConfig(allow_soft_placement=True))
    with caplog.at_level(logging.INFO, logger="feedq.devices"), device("/gpu:0"):
        p = place(req("i", "Variable", (np.int32,)))
    assert p.soft and p.device.to_string() == f"{LOCAL}/device:CPU:0"
    assert p.requested.to_string() == "/device:GPU:0"
    assert p.reason == "no GPU is visible: torch 2.13.0+cpu is a CPU-only build"
    line = (f"i: (Variable): {LOCAL}/device:CPU:0 [cpu] (soft placement: /device:GPU:0 "
            f"unavailable: no GPU is visible: torch 2.13.0+cpu is a CPU-only build)")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, line)]


def test_unspecified_device_prefers_gpu(gpus: Any) -> None:
    assert place(req(dtypes=(np.float32,))).torch_device == "cuda:0"
    # A string stage cannot live on a GPU: the host, quietly (nothing was asked).
    p = place(req(dtypes=(np.dtype(object),)))
    assert p.torch_device == "cpu" and not p.soft


def test_unspecified_device_without_gpu_is_cpu(no_gpu: None,
                                               caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="feedq.devices"):
        p = place(req())
    assert p.torch_device == "cpu" and not p.soft and caplog.records == []


@pytest.mark.parametrize("name, reason", [
    ("/gpu:2", "GPU:2 does not exist: 2 GPU(s) visible (CUDA_VISIBLE_DEVICES="),
    ("/device:TPU:0", "no device of type TPU (feedq places stages on CPU and GPU)"),
    ("/cpu:1", "this process has one CPU device, /device:CPU:0"),
    ("/job:ps/task:0/cpu:0", ("/job:ps/task:0 is not this process (/job:localhost/replica:0/"
                              "task:0); placing on other tasks is feedq.distributed's job")),
])
def test_unavailable_reasons(gpus: Any, name: str, reason: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        place(req(device_=name))
    assert reason in str(info.value)
    p = place(req(device_=name), DeviceConfig(allow_soft_placement=True))
    assert p.soft and p.torch_device == "cpu" and p.reason is not None
    assert p.reason.startswith(reason)


def test_string_dtype_cannot_go_to_gpu(gpus: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="dtype object cannot be held on a GPU"):
        place(req(dtypes=(np.dtype(object),), device_="cuda:0"))
    assert place(req(dtypes=(np.int32,), device_="cuda:1")).torch_device == "cuda:1"


def test_visible_devices_maps_gpu_index(gpus: Any) -> None:
    gpus(3)
    config = DeviceConfig(visible_devices="2,0")
    assert place(req(device_="/gpu:0"), config).torch_device == "cuda:2"
    assert place(req(device_="/gpu:1"), config).torch_device == "cuda:0"
    with pytest.raises(InvalidArgumentError, match=r"GPU:2 does not exist: 2 GPU\(s\) visible "
                                                    r"\(DeviceConfig\.visible_devices=2,0\)"):
        place(req(device_="/gpu:2"), config)
    with pytest.raises(InvalidArgumentError, match="visible_devices entry 5, but CUDA sees only"):
        place(req(device_="/gpu:0"), DeviceConfig(visible_devices=[5]))


def test_job_and_task_of_this_process_are_local(gpus: Any) -> None:
    config = DeviceConfig(job="worker", task=1)
    p = place(req(device_="/job:worker/task:1/gpu:1"), config)
    assert p.device.to_string() == "/job:worker/replica:0/task:1/device:GPU:1"
    with pytest.raises(InvalidArgumentError, match="is not this process"):
        place(req(device_="/job:worker/task:0/gpu:1"), config)


def test_memory_fraction_applied_once_per_gpu(gpus: Any, monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(_placement, "_fractions_applied", {})
    calls: list[tuple[float, int]] = []
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(
        set_per_process_memory_fraction=lambda f, i: calls.append((f, i))))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    set_device_config(DeviceConfig(gpu_memory_fraction=0.4))
    with caplog.at_level(logging.INFO, logger="feedq.devices"):
        place(req(device_="cuda:1"))
        place(req(device_="cuda:1"))
        place(req(device_="cuda:0"))
        place(req(device_="cpu"))
    assert calls == [(0.4, 1), (0.4, 0)]
    assert [r.getMessage() for r in caplog.records] == [
        "cuda:1: memory limited to 40% (torch)", "cuda:0: memory limited to 40% (torch)"]
    set_device_config(DeviceConfig(gpu_memory_fraction=0.5))  # a new config applies again
    place(req(device_="cuda:1"))
    assert calls[-1] == (0.5, 1)
    set_device_config(DeviceConfig())  # no limit: lifts the earlier one, once
    place(req(device_="cuda:1"))
    place(req(device_="cuda:1"))
    assert calls[-1] == (1.0, 1) and len(calls) == 4


# -- list_devices --------------------------------------------------------------


def test_list_devices_without_gpu_says_why() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU (tests/devices/test_gpu.py covers it)")
    listing = list_devices()
    assert [d.name for d in listing] == ["/device:CPU:0"]
    assert len(listing) == 1
    assert any(m.startswith("torch: ") for m in listing.missing)
    assert "/device:CPU:0" in str(listing)
    no_driver = (f"torch: torch {torch.__version__} (CUDA {torch.version.cuda}) finds no GPU "
                 f"(driver missing? CUDA_VISIBLE_DEVICES={_placement._visible_env()})")
    assert listing.missing[0] in (f"torch: torch {torch.__version__} is a CPU-only build",
                                  no_driver)


def test_list_devices_with_fake_gpus(gpus: Any) -> None:
    gpus(3)
    listing = list_devices(DeviceConfig(visible_devices=[2, 0, 7]))
    assert [(d.name, d.torch_device) for d in listing] == [
        ("/device:CPU:0", "cpu"), ("/device:GPU:0", "cuda:2"), ("/device:GPU:1", "cuda:0")]
    assert listing.devices[1].description == "FakeGPU 2, 16.0 GiB"
    assert any("visible_devices entry 7 is past the 3 GPU(s)" in m for m in listing.missing)
    assert "cuda:1 hidden by DeviceConfig.visible_devices" in listing.missing


def test_probe_reports_hidden_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    probe = _placement._probe_torch()
    assert probe.count == 0 and probe.reason is not None


# -- extras --------------------------------------------------------------------


def test_missing_extra_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes "import cupy" fail
    with pytest.raises(MissingExtraError, match=(
            r'^feedq\.to_cupy needs cupy, which is not installed: pip install "feedq\[cupy\]"$')):
        feedq.devices.to_cupy(np.zeros(3))
    assert issubclass(MissingExtraError, ImportError)
    assert issubclass(MissingExtraError, FailedPreconditionError)


def test_importing_devices_loads_no_extra() -> None:
    import subprocess

    code = ("import sys, feedq.devices; "
            "print(sorted(m for m in ('torch', 'cupy', 'tensorflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.strip() == "[]"
