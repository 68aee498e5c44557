"""The implementation of :mod:`feedq.devices` (private: import from ``feedq.devices``).

One idea per module: ``spec`` (device names), ``placement`` (contexts, config,
the placer), ``listing`` (``list_devices``), ``tensors`` (placing what PyTorch
creates in a block), ``variables`` (``Variable``), ``structure`` (batch
structure), ``source`` (a feeder's queue or iterable), ``targets`` (a feeder's
placed devices), ``engines`` (copy engines), ``feeder`` (``DeviceFeeder``:
set-up, life cycle, consumer side), ``feeder_thread`` (the loop its thread
runs), ``handoff`` (what the thread hands the consumer, ``FeederStatistics``),
``adapters`` (torch, tf.data, CuPy) and ``extras`` (late imports).
"""
