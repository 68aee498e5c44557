"""Eager PyTorch placement: the seed's "Placing Operations on Devices" cells on tensors.

Inside ``feedq.device(...)`` the tensors, modules and variables PyTorch
creates land on the device the contexts choose. PyTorch's ``meta`` device
stands in for a second device on this CPU-only machine: a tensor that ends up
there was moved by feedq, not left on the CPU by default. GPU machines are
modelled with a fake probe where only the decision is checked; real CUDA
placement is in test_devices_gpu.py.
"""

from __future__ import annotations

import copy
import logging
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from feedq._devices import placement as _placement
from feedq._devices.tensors import place_tensor
from feedq._devices.variables import NumpyVariable
from feedq.devices import (
    DeviceConfig,
    DeviceSpec,
    PlacementRequest,
    Variable,
    device,
    set_device_config,
)
from feedq.errors import InvalidArgumentError

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(30)

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
META = "/job:localhost/replica:0/task:0/device:META:0"
NO_GPU = "no GPU is visible: torch 2.13.0+cpu is a CPU-only build"


@pytest.fixture(autouse=True)
def _restore_config() -> Iterator[None]:
    previous = set_device_config(DeviceConfig())
    yield
    set_device_config(previous)
    # Nothing may stay pushed on PyTorch's mode stack after a block.
    assert torch._C._len_torch_function_stack() == 0


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same answer on every machine: CUDA sees no GPU."""
    probe = _placement._GpuProbe(0, "torch 2.13.0+cpu is a CPU-only build")
    monkeypatch.setattr(_placement, "_probe", lambda: probe)


def factories() -> dict[str, Any]:
    return {
        "zeros": torch.zeros(2, 3), "ones": torch.ones(4), "empty": torch.empty(2),
        "rand": torch.rand(3), "randn": torch.randn(3), "randint": torch.randint(0, 9, (3,)),
        "arange": torch.arange(5), "full": torch.full((2, 2), 7.0), "eye": torch.eye(3),
        "linspace": torch.linspace(0, 1, 4), "tensor": torch.tensor([1, 2, 3]),
        "as_tensor": torch.as_tensor(np.ones(3)), "scalar_tensor": torch.scalar_tensor(2),
    }


# -- specs: a name, a DeviceSpec, a torch.device ---------------------------------


@pytest.mark.parametrize("spec", ["meta", "/device:META:0", DeviceSpec(device_type="META")],
                         ids=["torch-name", "tf-name", "DeviceSpec"])
def test_factories_land_on_the_device_of_the_block(spec: Any) -> None:
    with device(spec):
        made = factories()
    assert {name: str(t.device) for name, t in made.items()} == {name: "meta" for name in made}
    assert {str(t.device) for t in factories().values()} == {"cpu"}  # no effect outside


def test_torch_device_object_and_cpu_spec() -> None:
    with device(torch.device("meta")):
        assert torch.zeros(1).device.type == "meta"
    with device("/cpu:0"):
        assert torch.zeros(1).device.type == "cpu"


def test_explicit_device_and_like_functions_are_left_alone() -> None:
    base = torch.ones(2)
    with device("meta"):
        assert torch.zeros(2, device="cpu").device.type == "cpu"
        assert torch.zeros_like(base).device.type == "cpu"  # follows its input
        assert torch.from_numpy(np.ones(2)).device.type == "cpu"  # a view of host memory
        out = torch.empty(3)
        assert torch.zeros(3, out=torch.empty(3, device="cpu")).device.type == "cpu"
    assert out.device.type == "meta"


def test_same_random_numbers_inside_and_outside() -> None:
    """The dry run that tells a device function the dtype and shape draws nothing."""
    torch.manual_seed(3)
    expected = torch.rand(4), torch.randn(4), torch.randint(0, 100, (4,))
    torch.manual_seed(3)
    with device("cpu"):
        got = torch.rand(4), torch.randn(4), torch.randint(0, 100, (4,))
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


# -- device functions -------------------------------------------------------------


def test_device_function_chooses_by_kind_and_dtype() -> None:
    seen: list[PlacementRequest] = []

    def floats_to_meta(op: PlacementRequest) -> str:
        seen.append(op)
        return "meta" if op.dtype is not None and op.dtype.is_floating_point else "cpu"

    with device(floats_to_meta):
        x = torch.zeros(2, 3)
        n = torch.arange(5)
        t = torch.tensor([[1.5], [2.5]], dtype=torch.float64)
    assert (x.device.type, n.device.type, t.device.type) == ("meta", "cpu", "meta")
    assert [(op.kind, op.type, op.name, op.dtype, op.shape) for op in seen] == [
        ("tensor", "zeros", "", torch.float32, (2, 3)),
        ("tensor", "arange", "", torch.int64, (5,)),
        ("tensor", "tensor", "", torch.float64, (2, 1)),
    ]
    assert all(op.device == "" for op in seen)


def test_seed_variables_on_cpu_function() -> None:
    """The seed's dynamic placement cell: variables pinned, other ops elsewhere."""

    def variables_on_cpu(op: PlacementRequest) -> str:
        return "/cpu:0" if op.type == "Variable" else "meta"

    with device(variables_on_cpu):
        a = Variable(3.0, name="a")
        b = torch.tensor(4.0)  # tf.constant: not a Variable
    assert (a.device.type, b.device.type) == ("cpu", "meta")
    assert a.item() == 3.0


def test_nesting_merges_inner_fields_win() -> None:
    seen: list[str] = []

    def record(op: PlacementRequest) -> str:
        seen.append(op.device)
        return op.device

    with device("/job:localhost/task:0"), device(record):
        with device("meta"):
            inner = torch.zeros(1)
            with device(None):  # ignores every outer block: PyTorch's default
                cleared = torch.zeros(1)
        outer = torch.zeros(1)
    # The function saw the inner block's choice and kept it; outside it, nothing.
    assert seen == ["/device:META:*", ""]
    assert (inner.device.type, cleared.device.type, outer.device.type) == ("meta", "cpu", "cpu")


def test_repeated_creations_follow_the_current_block(no_gpu: None) -> None:
    """Decisions for blocks of names are remembered; they never go stale."""
    got = []
    with device("meta"):
        for inner in ["cpu", "meta", "cpu", None]:
            got.append(torch.zeros(1).device.type)
            with device(inner):
                got.append(torch.zeros(1).device.type)
        with device("cuda:0"):
            with pytest.raises(InvalidArgumentError):
                torch.ones(1)
            set_device_config(DeviceConfig(allow_soft_placement=True))
            got.append(torch.ones(1).device.type)
            set_device_config(DeviceConfig())
            with pytest.raises(InvalidArgumentError):
                torch.ones(1)
    assert got == ["meta", "cpu", "meta", "meta", "meta", "cpu", "meta", "cpu", "cpu"]


def test_block_without_a_device_type_leaves_pytorch_default() -> None:
    with device("/job:localhost/task:0"):
        assert torch.zeros(1).device.type == "cpu"
    with torch.device("meta"), device("/job:localhost"):
        assert torch.zeros(1).device.type == "meta"  # PyTorch's own default applies


def test_other_task_is_not_this_process() -> None:
    with device("/job:ps/task:0/cpu:0"), pytest.raises(
            InvalidArgumentError, match=r"/job:ps/task:0 is not this process"):
        torch.zeros(1)


def test_other_task_without_a_device_type_is_not_this_process_either() -> None:
    """tf.device("/job:ps/task:0") names a task, not a device type: a tensor
    created in it cannot be placed here, as with "/job:ps/task:0/cpu:0"
    (before, it silently went to PyTorch's default device, unlogged)."""
    with device("/job:ps/task:0"), pytest.raises(
            InvalidArgumentError, match=r"'/job:ps/task:0': /job:ps/task:0 is not this process"):
        torch.zeros(1)
    with device("/job:worker/task:3"), pytest.raises(InvalidArgumentError, match=r"not this process"):
        Variable(1.0, name="w")


def test_other_task_without_a_device_type_falls_back_softly_and_logs(
        caplog: pytest.LogCaptureFixture) -> None:
    set_device_config(DeviceConfig(allow_soft_placement=True))
    with caplog.at_level(logging.INFO, logger="feedq.devices"), device("/job:ps/task:0"):
        x = torch.zeros(1)
    assert x.device.type == "cpu"
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", (f"tensor zeros float32[1]: {CPU} [cpu] (soft placement: /job:ps/task:0 "
                     f"unavailable: /job:ps/task:0 is not this process "
                     f"(/job:localhost/replica:0/task:0); placing on other tasks is "
                     f"feedq.distributed's job)")),
    ]


# -- soft placement and the log ------------------------------------------------------


def test_missing_gpu_without_soft_placement_raises(no_gpu: None) -> None:
    with device("cuda:0"), pytest.raises(InvalidArgumentError, match=(
            r"^Cannot assign a device for tensor ones float32\[2\]: could not satisfy device "
            r"specification '/device:GPU:0': no GPU is visible: torch 2\.13\.0\+cpu is a "
            r"CPU-only build\. Set allow_soft_placement=True in feedq\.DeviceConfig to fall "
            r"back to /device:CPU:0$")):
        torch.ones(2)


def test_missing_gpu_with_soft_placement_falls_back_and_logs(
        caplog: pytest.LogCaptureFixture, no_gpu: None) -> None:
    set_device_config(DeviceConfig(allow_soft_placement=True))
    with caplog.at_level(logging.INFO, logger="feedq.devices"), device("cuda:0"):
        x = torch.ones(2)
        i = Variable(3, name="i")  # the seed's integer variable on /gpu:0
    assert (x.device.type, i.device.type) == ("cpu", "cpu")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", (f"tensor ones float32[2]: {CPU} [cpu] (soft placement: /device:GPU:0 "
                     f"unavailable: {NO_GPU})")),
        ("WARNING", (f"parameter 'i' (Variable) int64[]: {CPU} [cpu] (soft placement: "
                     f"/device:GPU:0 unavailable: {NO_GPU})")),
    ]


def test_log_device_placement_one_line_per_tensor(caplog: pytest.LogCaptureFixture) -> None:
    set_device_config(DeviceConfig(log_device_placement=True))
    with caplog.at_level(logging.INFO, logger="feedq.devices"):
        with device("meta"):
            torch.zeros(2, 3)
            torch.nn.Linear(3, 4)
            Variable(1.0, name="w")
        with device("/cpu:0"):
            torch.arange(4)
        torch.ones(1)  # outside any block: not placed, not logged
    assert [r.getMessage() for r in caplog.records] == [
        f"tensor zeros float32[2, 3]: {META} [meta]",
        f"module Linear/empty float32[4, 3]: {META} [meta]",
        f"module Linear/empty float32[4]: {META} [meta]",
        f"parameter 'w' (Variable) float32[]: {META} [meta]",
        f"tensor arange int64[4]: {CPU} [cpu]",
    ]


def test_no_log_without_log_device_placement(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="feedq.devices"), device("meta"):
        torch.zeros(1)
    assert caplog.records == []


def test_visible_devices_map_gpu_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision on a (modelled) two-GPU machine: /gpu:0 is CUDA's device 1."""
    probe = _placement._GpuProbe(2, None, ("Fake", "Fake"), (2**30, 2**30))
    monkeypatch.setattr(_placement, "_probe", lambda: probe)
    config = DeviceConfig(visible_devices="1,0")
    request = PlacementRequest("", "zeros", kind="tensor", dtype=torch.float32, shape=(2,))
    with device("/gpu:0"):
        placement = place_tensor(request, config)
    assert placement is not None and placement.torch_device == "cuda:1"
    with device("/gpu:2"), pytest.raises(InvalidArgumentError, match="GPU:2 does not exist"):
        place_tensor(request, config)


# -- modules and parameters -------------------------------------------------------------


def test_module_construction_placed_whole() -> None:
    with device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                    torch.nn.Linear(4, 1))
    tensors = list(model.parameters()) + list(model.buffers())
    assert len(tensors) == 9 and {t.device.type for t in tensors} == {"meta"}
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())


class Net(torch.nn.Module):  # type: ignore[misc,name-defined]
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)
        self.scale = torch.nn.Parameter(torch.ones(2))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))


def test_module_is_one_decision_for_all_its_tensors() -> None:
    seen: list[PlacementRequest] = []

    def modules_to_meta(op: PlacementRequest) -> str:
        seen.append(op)
        return "meta" if op.kind == "module" else "cpu"

    with device(modules_to_meta):
        net = Net()
        loose = torch.ones(2)
    assert {t.device.type for t in [*net.parameters(), *net.buffers()]} == {"meta"}
    assert loose.device.type == "cpu"
    assert [(op.kind, op.type) for op in seen] == [("module", "Net"), ("tensor", "ones")]


def test_blocks_inside_a_module_constructor_each_apply() -> None:
    class Split(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            with device("cpu"):
                self.a = torch.nn.Linear(2, 2)
            with device("meta"):
                self.b = torch.nn.Linear(2, 2)

    split = Split()
    assert (split.a.weight.device.type, split.b.weight.device.type) == ("cpu", "meta")


def test_parameter_wraps_a_placed_tensor() -> None:
    with device("meta"):
        p = torch.nn.Parameter(torch.randn(2))
        empty = torch.nn.Parameter()
    assert (p.device.type, empty.device.type) == ("meta", "meta")


# -- threads ------------------------------------------------------------------------


def test_blocks_are_thread_local() -> None:
    inside = threading.Event()
    results: dict[str, str] = {}

    def other() -> None:
        if not inside.wait(5):
            raise AssertionError("main thread never entered its block")
        results["other plain"] = torch.zeros(1).device.type
        with device("cpu"):
            results["other block"] = torch.zeros(1).device.type

    thread = threading.Thread(target=other, name="test-devices-other")
    with device("meta"):
        thread.start()
        inside.set()
        thread.join(10)
        results["main"] = torch.zeros(1).device.type
    assert not thread.is_alive()
    assert results == {"other plain": "cpu", "other block": "cpu", "main": "meta"}


# -- Variable -----------------------------------------------------------------------


def test_variable_is_a_named_parameter() -> None:
    a, b = Variable(3.0, name="a"), Variable(4.0, name="b")
    c = a * b  # the seed's simple placement cell
    assert isinstance(a, torch.nn.Parameter) and (a.name, b.name) == ("a", "b")
    assert c.item() == 12.0 and c.requires_grad and a.trainable
    assert a.dtype == torch.float32 and a.shape == ()
    assert repr(a) == "Variable 'a' containing:\ntensor(3.)"
    frozen = Variable([1.0, 2.0], name="f", trainable=False)
    assert not frozen.requires_grad and not frozen.trainable
    i = Variable(3)
    assert i.dtype == torch.int64 and not i.requires_grad  # PyTorch: no int gradients
    assert i.name.startswith("Variable")
    assert Variable(np.arange(3, dtype=np.int16)).dtype == torch.int16


def test_variable_copies_its_initial_value() -> None:
    initial = torch.ones(2)
    v = Variable(initial)
    initial += 1
    array = np.ones(2, np.float32)
    w = Variable(array)
    array += 1
    assert v.tolist() == [1.0, 1.0] and w.tolist() == [1.0, 1.0]


def test_variable_registers_with_modules_and_optimizers() -> None:
    module = torch.nn.Module()
    module.w = Variable(torch.zeros(2), name="w")
    opt = torch.optim.SGD(module.parameters(), lr=1.0)
    (module.w * 2).sum().backward()
    opt.step()
    assert module.w.tolist() == [-2.0, -2.0]
    assert [n for n, _ in module.named_parameters()] == ["w"]


def test_variable_survives_copy_and_pickle() -> None:
    v = Variable([1.0, 2.0], name="v", trainable=False)
    for clone in (copy.deepcopy(v), pickle.loads(pickle.dumps(v))):
        assert type(clone) is type(v) and clone.name == "v" and not clone.trainable
        assert clone.tolist() == [1.0, 2.0] and clone.data_ptr() != v.data_ptr()


def test_string_variable_is_numpy_in_host_memory(caplog: pytest.LogCaptureFixture,
                                                  no_gpu: None) -> None:
    s = Variable(["a", "bc"], name="s")
    assert isinstance(s, NumpyVariable) and s.name == "s" and s.device == "cpu"
    assert s.numpy().tolist() == ["a", "bc"] and s.shape == (2,)
    with device("cuda:0"), pytest.raises(
            InvalidArgumentError, match=r"'/device:GPU:0': torch cannot hold dtype <U2: the "
                                        r"variable is a NumPy array in host memory\."):
        Variable(["a", "bc"])
    set_device_config(DeviceConfig(allow_soft_placement=True))
    with caplog.at_level(logging.INFO, logger="feedq.devices"), device("meta"):
        Variable([b"x"], name="t")
    assert [r.getMessage() for r in caplog.records] == [
        (f"parameter 't' (Variable) |S1[1]: {CPU} [cpu] (soft placement: /device:META:* "
         f"unavailable: torch cannot hold dtype |S1: the variable is a NumPy array in host "
         f"memory)")]


def test_variable_without_torch_is_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails from here on
    a, b = Variable(3.0, name="a"), Variable(np.array([1, 2]), name="b")
    assert isinstance(a, NumpyVariable) and isinstance(b, NumpyVariable)
    assert float(a * 4.0) == 12.0 and (b + 1).tolist() == [2, 3]
    assert np.asarray(b) is b.value and repr(b) == "Variable 'b' containing:\narray([1, 2])"
    with device("cpu"):
        assert Variable(1.0).device == "cpu"
    with device("cuda:0"), pytest.raises(InvalidArgumentError, match=(
            r"torch is not installed \(pip install \"feedq\[torch\]\"\): the variable is a "
            r"NumPy array in host memory")):
        Variable(1.0)


def test_entering_a_block_does_not_import_torch() -> None:
    code = ("import sys, feedq\n"
            "with feedq.device('/gpu:0'):\n"
            "    v = feedq.Variable(1.0) if 'torch' in sys.modules else None\n"
            "assert 'torch' not in sys.modules, 'feedq.device imported torch'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
