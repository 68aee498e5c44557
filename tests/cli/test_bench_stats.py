"""``feedq bench`` prints the per-stage table and which stage limits the run
and why (issue 15); ``--json`` carries them under ``"stages"`` and
``"bottleneck"``."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from feedq.cli import main
from feedq.cli._bench import BenchResult, run_bench, verdict_line
from feedq.cli._schema import infer_schema
from feedq.cli.datasets import make_dataset
from feedq.pipeline import (
    Bottleneck,
    ConsumerTiming,
    PipelineStatistics,
    QueueTiming,
    StageTiming,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stats")
    make_dataset(root / "csv", "csv", 4000, files=2, layout="realistic")
    make_dataset(root / "tfrecord", "tfrecord", 2000, files=2, layout="realistic")
    return root


def bench(*args: str) -> str:
    res = CliRunner().invoke(main, ["bench", *args, "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("fmt", ["csv", "tfrecord"])
def test_table_and_verdict_lines(data: Path, fmt: str) -> None:
    lines = bench(str(data / fmt)).splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("  pipeline statistics after "))
    assert lines[start + 1].split()[:6] == ["stage", "kind", "thr", "busy", "in", "wait"]
    rows = [x.split() for x in lines[start + 3 : start + 5]]
    assert rows[0][:3] == ["input_producer", "producer", "1"]
    assert rows[1][1:3] == ["batcher", "2"]  # the 2 reader threads
    assert int(rows[1][6]) == (4000 if fmt == "csv" else 2000)  # records out
    assert any(x.startswith("  consumer: ") and "data readiness" in x for x in lines)
    verdict = lines[-1]
    assert verdict.startswith("bottleneck: the readers (") and " while " in verdict or \
        verdict.startswith("bottleneck: none in the pipeline: the consumer (this measuring loop) "
                           "is the limit: it waited "), verdict
    # The library's generic verdict line is replaced by the bench one: one verdict.
    assert sum(x.startswith("bottleneck:") or x.startswith("  bottleneck:") for x in lines) == 1


def test_json_has_stages_and_bottleneck(data: Path) -> None:
    out = json.loads(bench(str(data / "csv"), "--json", "--readers", "3"))
    stages = out["stages"]
    assert [s["kind"] for s in stages] == ["producer", "batcher"]
    assert stages[1]["threads"] == 3 and stages[1]["records_out"] == out["records"] == 4000
    assert stages[1]["busy_s"] > 0
    assert {q["name"] for q in out["queues"]} == {s["name"] for s in stages}
    assert out["consumer"]["takes"] >= out["batches"]
    b = out["bottleneck"]
    assert set(b) == {"stage", "reason", "cause"} and b["reason"]
    assert b["cause"] in ("consumer", "stage", "capacity")
    # Blocked time (the statistics) is part of the time in take (wait + copy).
    assert 0.0 <= out["consumer_blocked_fraction"] <= out["consumer_wait_fraction"] + 0.05
    assert b["stage"] in (None, *[s["name"] for s in stages])
    # The verdict line carries the evidence of the reason (its figures, in order).
    figures = re.findall(r"\d+%", b["reason"])
    assert out["verdict"].startswith("bottleneck: ") and figures
    assert re.findall(r"\d+%", out["verdict"])[: len(figures)] == figures
    assert out["cpu_seconds"] > 0 and out["cpus"] >= 1


def test_direct_mode_names_the_direct_loop(data: Path) -> None:
    out = json.loads(bench(str(data / "csv"), "--json", "--direct"))
    assert out["stages"] == [] and out["bottleneck"]["stage"] == "read + decode (direct loop)"
    assert bench(str(data / "csv"), "--direct").splitlines()[-1].startswith(
        "bottleneck: read + decode (direct loop): ")


def test_a_slow_consumer_is_named_the_limit(data: Path) -> None:
    files = sorted(str(p) for p in (data / "csv").iterdir())
    schema = infer_schema(files, "csv", None)
    step = threading.Event()

    def slow(batch: Any) -> None:
        step.wait(0.01)  # never set: a consumer that takes 10 ms a batch

    # Small blocks: the first batch is ready at once, so the consumer hardly waits.
    r = run_bench(files, schema, batch_size=64, readers=1, consume=slow, max_records=2560,
                  block_records=256)
    assert r.records == 2560 and r.statistics is not None
    assert r.statistics.bottleneck.stage is None
    assert verdict_line(r).startswith(
        "bottleneck: none in the pipeline: the consumer (this measuring loop) is the limit: "
        "it waited ")


def _stats(busy: float, threads: int = 2) -> PipelineStatistics:
    stages = (StageTiming("input_producer", "producer", 1, 0.0, 0.0, 0.0, 4, 0),
              StageTiming("batch_join/fifo_queue", "batcher", threads, busy, 0.0, 0.0, 1000, 0))
    queues = (QueueTiming("input_producer", 32, 0, 0.0, 0.1, 0.0, 0.0),
              QueueTiming("batch_join/fifo_queue", 100, 0, 0.0, 0.5, 0.0, 0.8))
    return PipelineStatistics(1.0, stages, queues, ConsumerTiming(10, 9, 0.8, 0.1),
                              Bottleneck("batch_join/fifo_queue", "batcher 'x' is busy"))


@pytest.mark.parametrize(("busy", "cpu", "hint"), [
    (0.5, 0.6, "the reader threads were busy 0.5 thread-s/s, the process used 0.6 of 2 CPUs: "
               "more --readers or --threads can help"),
    (1.9, 0.9, "the reader threads were busy 1.9 thread-s/s, the process used 0.9 of 2 CPUs: "
               "the process ran about one CPU at a time, so the busy threads took turns on the "
               "GIL; more readers will not help"),
    (1.9, 0.1, "the reader threads were busy 1.9 thread-s/s, the process used 0.1 of 2 CPUs: "
               "other processes held the CPUs (machine load), not decoding or the GIL; re-run "
               "on a quieter machine"),
    (1.9, 1.9, "the reader threads were busy 1.9 thread-s/s, the process used 1.9 of 2 CPUs: "
               "every CPU is busy; cheaper decoding would help, more readers not"),
])
def test_reader_verdict_says_whether_more_readers_can_help(busy: float, cpu: float,
                                                           hint: str) -> None:
    r = BenchResult("csv", 2, seconds=1.0, cpu_seconds=cpu, cpus=2, statistics=_stats(busy))
    line = verdict_line(r)
    assert line.startswith("bottleneck: the readers (read_block + decode, 2 threads feeding "
                           "'batch_join/fifo_queue'): batcher 'x' is busy; ")
    assert line.endswith(hint) or hint in line, line
    assert r.as_dict()["bottleneck"] == {"stage": "batch_join/fifo_queue",
                                         "reason": "batcher 'x' is busy", "cause": "stage"}


def test_a_short_run_gets_a_caveat() -> None:
    short = BenchResult("csv", 2, seconds=0.2, cpu_seconds=0.1, cpus=2, statistics=_stats(0.1))
    assert verdict_line(short).endswith(
        "(a run of 0.20 s: more records or --epochs give a steadier verdict)")
    long = BenchResult("csv", 2, seconds=2.0, cpu_seconds=1.0, cpus=2, statistics=_stats(0.1))
    assert "steadier" not in verdict_line(long)
