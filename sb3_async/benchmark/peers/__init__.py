"""The contract of the benchmark's external peers: an adapter per (library, algorithm), each run in a fresh process
under the Python of the peer's own virtual environment, as ``PYTHON ADAPTER.py SPEC.json RESULT.json`` (or
``PYTHON -m ADAPTER ...``).

- :mod:`~sb3_async.benchmark.peers.protocol`: what every adapter runs under (the training clock, the deterministic
  evaluation of the frozen policy off the clock, the stop rules, the record);
- :mod:`~sb3_async.benchmark.peers.fixed_policy`: the smallest adapter (no library, no training), the template and
  the test of the protocol.

The adapters of other libraries (Sample Factory, TorchRL, Tianshou) are not part of the package: the repository's
``benchmarks/peers`` holds them and registers them (``python -m sb3_async.benchmark --peers-from benchmarks/peers``).
Nothing here is imported by the benchmark itself: the registry names the adapters, the runner starts them.
"""
