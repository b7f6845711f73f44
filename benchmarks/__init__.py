"""oocarray's benchmark runner: ``python -m benchmarks`` (see ``--help``).

Every figure is a ratio of the two sides measured in alternating rounds in one process, as
``/work/shared/PERFORMANCE.md`` asks: absolute times on a shared machine do not carry.
"""
