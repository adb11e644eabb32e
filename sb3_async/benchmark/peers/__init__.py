"""External peers of the benchmark: one adapter module per (library, algorithm), each run in a fresh process under the
Python of the peer's own virtual environment, as ``PYTHON -m sb3_async.benchmark.peers.<name> SPEC.json RESULT.json``.

- :mod:`~sb3_async.benchmark.peers.protocol`: what every adapter runs under (the training clock, the deterministic
  evaluation of the frozen policy off the clock, the stop rules, the record);
- :mod:`~sb3_async.benchmark.peers.fixed_policy`: the smallest adapter (no library, no training), the template and
  the test of the protocol;
- one module per peer (``torchrl_ppo``, ``tianshou_dqn``, ...), importing its library only when it runs.

Nothing here is imported by the benchmark itself: the registry names the adapters, the runner starts them.
"""
