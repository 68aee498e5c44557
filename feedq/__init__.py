"""feedq: TF1-style input pipelines for eager Python, NumPy and PyTorch.

One package per idea, each importing only those below it; the order is the
import-linter contract in ``pyproject.toml`` (checked in CI, explained in
docs/design.md, "Layers"). This module re-exports the public surface; optional
parts (torch, cupy, ray, tensorflow) load on first use.
"""

from __future__ import annotations

from feedq import devices, errors, image, process, readers, storage
from feedq._core.priority import loader_niceness, set_loader_niceness
from feedq._core.timeouts import get_default_timeout, set_default_timeout
from feedq.coordinator import Coordinator, LooperThread
from feedq.devices import (
    DeviceConfig,
    DeviceFeeder,
    DeviceSpec,
    MissingExtraError,
    Variable,
    as_tf_dataset,
    as_torch_dataset,
    current_device,
    device,
    get_device_config,
    list_devices,
    set_device_config,
    to_cupy,
    to_torch,
)
from feedq.input import (
    Stage,
    StageStatistics,
    batch,
    batch_join,
    input_producer,
    limit_epochs,
    match_filenames_once,
    maybe_batch,
    maybe_batch_join,
    maybe_shuffle_batch,
    maybe_shuffle_batch_join,
    range_input_producer,
    reshard_states,
    shuffle_batch,
    shuffle_batch_join,
    slice_input_producer,
    string_input_producer,
)
from feedq.pipeline import (
    Bottleneck,
    ConsumerTiming,
    Pipeline,
    PipelineStatistics,
    QueueTiming,
    ShuffleBufferTiming,
    StageTiming,
    StorageTiming,
    control_dependencies,
    current_pipeline,
    format_report,
    get_stall_timeout,
    prometheus_collector,
    set_stall_timeout,
)
from feedq.process import ProcessStage, process_stage
from feedq.queues import (
    STRING,
    CancelToken,
    ConditionalAccumulator,
    FIFOQueue,
    PaddingFIFOQueue,
    PriorityQueue,
    QueueBase,
    QueueStatistics,
    RandomShuffleQueue,
    reset_shared_queues,
)
from feedq.runners import (
    QUEUE_RUNNERS,
    QueueRunner,
    QueueRunnerStatistics,
    add_queue_runner,
    clear_queue_runners,
    get_queue_runners,
    start_queue_runners,
)

__version__ = "0.1.0"

__all__ = [
    "Bottleneck",
    "CancelToken",
    "ConditionalAccumulator",
    "ConsumerTiming",
    "Coordinator",
    "DeviceConfig",
    "DeviceFeeder",
    "DeviceSpec",
    "FIFOQueue",
    "LooperThread",
    "MissingExtraError",
    "PaddingFIFOQueue",
    "Pipeline",
    "PipelineStatistics",
    "PriorityQueue",
    "ProcessStage",
    "QUEUE_RUNNERS",
    "QueueBase",
    "QueueRunner",
    "QueueRunnerStatistics",
    "QueueStatistics",
    "QueueTiming",
    "RandomShuffleQueue",
    "STRING",
    "ShuffleBufferTiming",
    "Stage",
    "StageStatistics",
    "StageTiming",
    "StorageTiming",
    "Variable",
    "add_queue_runner",
    "as_tf_dataset",
    "as_torch_dataset",
    "batch",
    "batch_join",
    "clear_queue_runners",
    "control_dependencies",
    "current_device",
    "current_pipeline",
    "device",
    "devices",
    "distributed",
    "errors",
    "format_report",
    "get_default_timeout",
    "get_device_config",
    "get_queue_runners",
    "get_stall_timeout",
    "image",
    "input_producer",
    "limit_epochs",
    "list_devices",
    "loader_niceness",
    "match_filenames_once",
    "maybe_batch",
    "maybe_batch_join",
    "maybe_shuffle_batch",
    "maybe_shuffle_batch_join",
    "process",
    "process_stage",
    "prometheus_collector",
    "range_input_producer",
    "readers",
    "reset_shared_queues",
    "reshard_states",
    "set_default_timeout",
    "set_device_config",
    "set_loader_niceness",
    "set_stall_timeout",
    "shuffle_batch",
    "shuffle_batch_join",
    "slice_input_producer",
    "start_queue_runners",
    "storage",
    "string_input_producer",
    "to_cupy",
    "to_torch",
]


def __getattr__(name: str) -> object:
    # feedq.distributed imports Ray on first use; load the package itself
    # lazily too, so `import feedq` stays light.
    if name == "distributed":
        import importlib

        return importlib.import_module(".distributed", __name__)
    raise AttributeError(f"module 'feedq' has no attribute {name!r}")
