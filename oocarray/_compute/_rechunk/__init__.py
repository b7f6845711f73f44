"""Rechunking larger than RAM in a budget: a plan (direct or two passes through a temporary
store), the passes that carry it out, and a progress marker that lets a rerun resume."""

from oocarray._compute._rechunk._plan import Plan, make_plan
from oocarray._compute._rechunk._run import rechunk

__all__ = ["Plan", "make_plan", "rechunk"]
