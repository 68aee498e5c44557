"""The seed's "Multithreaded readers using a Coordinator & QueueRunner" and
"shuffle_batch" patterns, in eager feedq.

Part 1 is the TF1 code almost line for line: a filename queue, a
TextLineReader + decode_csv "enqueue op" run by 5 QueueRunner threads into
a RandomShuffleQueue, a Coordinator, and a consumer loop that ends on
OutOfRangeError. Part 2 is the convenience-function version:
string_input_producer -> reader threads (batch-first: blocks of lines) ->
shuffle_batch. Part 3 shows a producer error reaching the consumer.

Ctrl-C stops cleanly: the pipeline is stopped, its threads joined, and what
was read so far is printed.

Run: python examples/coordinator_queue_runners.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import feedq
from feedq.errors import OutOfRangeError
from feedq.readers import TextLineReader, decode_csv


def make_csv(folder: Path, n_files: int, rows: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for f in range(n_files):
        path = folder / f"my_test_{f}.csv"
        lines = ["x1,x2,target"] + [f"{a:.3f},{b:.3f},{int(a + b > 1)}" for a, b in rng.random((rows, 2))]
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return paths


def part1_queue_runner(path: str) -> int:
    filename_queue = feedq.FIFOQueue(capacity=10, dtypes=[str], shapes=[[]])
    filename_queue.enqueue(path)  # sess.run(enqueue_filename, feed_dict={filename: ...})
    filename_queue.close()  # sess.run(close_filename_queue)

    reader = TextLineReader(skip_header_lines=1)  # shared by the 5 threads; reads are serialized (R1)
    instance_queue = feedq.RandomShuffleQueue(
        capacity=10, min_after_dequeue=2, dtypes=[np.float32, np.int32], shapes=[[2], []],
        name="instance_q", shared_name="shared_instance_q",
    )

    def enqueue_instance() -> None:
        key, value = reader.read(filename_queue)
        x1, x2, target = decode_csv(value, record_defaults=[[-1.0], [-1.0], [-1]])
        instance_queue.enqueue([np.stack([x1, x2]), target])

    queue_runner = feedq.QueueRunner(instance_queue, [enqueue_instance] * 5)
    coord = feedq.Coordinator()
    enqueue_threads = queue_runner.create_threads(coord=coord, start=True)
    seen = 0
    try:
        while True:
            minibatch_instances, minibatch_targets = instance_queue.dequeue_up_to(2)
            seen += len(minibatch_targets)
    except OutOfRangeError:
        print(f"part 1: {seen} instances, then: No more training instances")
    finally:
        coord.request_stop()
        coord.join(enqueue_threads)
    return seen


def part2_shuffle_batch(paths: list[str]) -> int:
    seen = 0
    with feedq.Pipeline() as pipe:
        filenames = feedq.string_input_producer(paths, num_epochs=2, seed=1)
        # pipe.closing: the readers are closed after the threads using them are joined.
        readers = [pipe.closing(TextLineReader(skip_header_lines=1)) for _ in range(3)]

        def read_block(reader: TextLineReader = readers[0]) -> list:
            block = reader.read_block(filenames, 512)  # one buffer of lines, no per-line objects
            x1, x2, target = decode_csv(block, record_defaults=[[0.0], [0.0], [0]])
            return [np.stack([x1, x2], axis=1), target]

        # One reader per thread, all feeding one shuffle buffer (the "N readers" pattern).
        inputs = [lambda r=r: read_block(r) for r in readers]
        batches = feedq.shuffle_batch_join(
            inputs, batch_size=128, capacity=4000, min_after_dequeue=1000, enqueue_many=True,
            dtypes=[np.float32, np.int32], shapes=[[2], []], allow_smaller_final_batch=True, seed=7,
        )
        for _features, target in batches:  # ends at the end of the data
            seen += len(target)
    print(f"part 2: {seen} instances in shuffled batches of up to 128")
    return seen


def part3_producer_error(folder: Path) -> None:
    bad = folder / "bad.csv"
    bad.write_text("x1,x2,target\n0.1,0.2,1\n0.3,oops,0\n")
    try:
        with feedq.Pipeline() as pipe:
            files = feedq.string_input_producer([str(bad)], num_epochs=1)
            reader = pipe.closing(TextLineReader(skip_header_lines=1))

            def read_one() -> list:
                _, value = reader.read(files)
                x1, x2, target = decode_csv(value, record_defaults=[[0.0], [0.0], [0]])
                return [np.stack([x1, x2]), target]

            for _ in feedq.batch(read_one, 2, dtypes=[np.float32, np.int32], shapes=[[2], []]):
                pass
    except feedq.errors.InvalidArgumentError as exc:
        print(f"part 3: the reader thread's error reached the consumer: {exc}")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = make_csv(folder, n_files=4, rows=2000)
        try:
            part1_queue_runner(paths[0])
            total = part2_shuffle_batch(paths)
            assert total == 2 * 4 * 2000, total
            part3_producer_error(folder)
        except KeyboardInterrupt:
            print("interrupted: pipeline stopped and its threads joined", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
