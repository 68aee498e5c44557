"""The seed notebook's "Async Communications (TF Queues)" section, in feedq.

Queueing and dequeuing data, queues of tuples, closing a queue,
RandomShuffleQueue, PaddingFIFOQueue, and timeouts (DeadlineExceeded) —
each as the TF1 code did it, but eager: a call is a Python method call.

Run: python examples/queues_basics.py
"""

from __future__ import annotations

import threading

import numpy as np

import feedq
from feedq.errors import DeadlineExceededError, OutOfRangeError


def queueing_and_dequeueing() -> None:
    # TF1: q = tf.FIFOQueue(capacity=10, dtypes=[tf.float32], shapes=[[2]])
    q = feedq.FIFOQueue(capacity=10, dtypes=[np.float32], shapes=[[2]])
    q.enqueue([[2.0, 3.0]])  # one element: a list holds one value per component
    q.enqueue_many([[[4.0, 5.0], [1.0, 0.0]]])  # a batch of two elements
    print("dequeue      ->", q.dequeue())
    print("dequeue_many ->", q.dequeue_many(2).tolist())


def queues_of_tuples() -> None:
    q = feedq.FIFOQueue(capacity=10, dtypes=[np.int32, np.float32], shapes=[[], [3, 2]])
    q.enqueue_many([[10, 11, 12], np.ones((3, 3, 2), np.float32)])
    a, b = q.dequeue_many(3)  # each component stacked on a new axis 0
    print("tuples       ->", a.tolist(), b.shape)


def closing_a_queue() -> None:
    q = feedq.FIFOQueue(capacity=10, dtypes=[np.int64], shapes=[[]])
    q.enqueue_many([np.arange(5)])
    q.close()  # no more enqueues; what is queued can still be dequeued
    print("after close  ->", q.dequeue_up_to(3).tolist(), q.dequeue_up_to(3).tolist())
    try:
        q.dequeue()
    except OutOfRangeError as exc:
        print("end of data  ->", exc)


def random_shuffle_queue() -> None:
    # The seed's instance queue: features float32[2] and an int32 target.
    q = feedq.RandomShuffleQueue(
        capacity=10, min_after_dequeue=2, dtypes=[np.float32, np.int32], shapes=[[2], []],
        name="instance_q", shared_name="shared_instance_q", seed=42,
    )
    q.enqueue_many([np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6, dtype=np.int32)])
    features, target = q.dequeue_many(3)  # 3 drawn at random, 3 stay (min_after_dequeue=2)
    print("shuffled     ->", target.tolist(), "left", q.size())
    same = feedq.RandomShuffleQueue(10, 2, [np.float32, np.int32], shapes=[[2], []],
                                    shared_name="shared_instance_q")
    print("shared_name  -> same queue, size", same.size())


def padding_fifo_queue() -> None:
    q = feedq.PaddingFIFOQueue(capacity=50, dtypes=[np.float32], shapes=[[None]])
    q.enqueue([np.array([1.0], np.float32)])
    q.enqueue([np.array([1.0, 2.0, 3.0], np.float32)])
    print("padded       ->", q.dequeue_many(2).tolist())


def timeouts() -> None:
    # TF1: RunOptions(timeout_in_ms=...) per call, ConfigProto(operation_timeout_in_ms=...) default.
    q = feedq.FIFOQueue(capacity=1, dtypes=[np.float32], shapes=[[]])
    try:
        q.dequeue(timeout=0.1)
    except DeadlineExceededError as exc:
        print("timeout      ->", type(exc).__name__)
    previous = feedq.set_default_timeout(0.1)
    try:
        q.dequeue()
    except DeadlineExceededError:
        print("default      -> DeadlineExceededError after 0.1 s")
    finally:
        feedq.set_default_timeout(previous)


def producer_consumer() -> None:
    q = feedq.FIFOQueue(capacity=4, dtypes=[np.int64], shapes=[[]])

    def produce() -> None:
        for start in range(0, 20, 5):
            q.enqueue_many([np.arange(start, start + 5)])  # blocks while full
        q.close()

    t = threading.Thread(target=produce, name="producer")
    t.start()
    total = sum(int(x) for x in q)  # iterating a queue dequeues until closed and drained
    t.join()
    print("threads      -> sum", total)


if __name__ == "__main__":
    queueing_and_dequeueing()
    queues_of_tuples()
    closing_a_queue()
    random_shuffle_queue()
    padding_fifo_queue()
    timeouts()
    producer_consumer()
