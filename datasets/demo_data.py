"""The data of ``oocarray demo``: a regression table of float32 features on very different
scales and a target linear in them, generated deterministically block by block.

The generator ships inside the package (``oocarray._cli._demo_data``) so that ``oocarray demo``
runs from an installed wheel, which has no ``datasets/``; this module is the same generator for
scripts and benchmarks in the source tree.

Examples
--------
>>> from datasets.demo_data import DemoData
>>> DemoData(n_rows=1000, block_rows=256).block(0).shape
(256, 32)
"""

from oocarray._cli._demo_data import COLUMNS, DTYPE, FEATURES, ROW_BYTES, DemoData

__all__ = ["COLUMNS", "DTYPE", "FEATURES", "ROW_BYTES", "DemoData"]
