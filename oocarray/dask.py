"""oocarray on Dask distributed: a budget per worker process, and its statistics.

Importing this module imports ``distributed`` (``pip install 'oocarray[dask]'``); an
``ImportError`` says so when it is missing.  ``oc.map_chunks(..., engine="dask")`` runs on a
cluster; ``x.to_dask()`` and ``oc.from_dask(d)`` need only dask itself.
"""

from oocarray._feed._dask import MemoryBudgetPlugin, budget_stats, budgeted, worker_manager

__all__ = ["MemoryBudgetPlugin", "budget_stats", "budgeted", "worker_manager"]
