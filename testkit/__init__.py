"""What the test suite and the benchmarks share, and neither owns.

* :mod:`testkit.children`: the one way to run a child Python interpreter (hermetic settings,
  this repository importable, a hang guard).
* :mod:`testkit.cgroup`: a memory cgroup with a hard limit, to run a child under.
* :mod:`testkit.model`: the pure-Python model of managers, arrays and stores that both state
  machines (``tests/memory/test_state_machine.py``, ``tests/reliability/test_system_machine.py``)
  compare the library with.
* :mod:`testkit.stores`: one factory per storage format, for the store contract
  (``tests/storage/test_store_contract.py``); a new backend joins the contract by adding one.
* :mod:`testkit.objects`: object-store servers on loopback (S3 by moto, GCS by
  gcp-storage-emulator) and a proxy that injects counted faults (errors, resets, short bodies,
  latency) in front of them.

A package of its own so that ``tests/`` never imports ``benchmarks/`` for a helper and
``benchmarks/`` never imports ``tests/``; it is not shipped in the wheel.
"""
