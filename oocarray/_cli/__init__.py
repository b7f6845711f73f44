"""The ``oocarray`` command: ``info``, ``stats``, ``convert``, ``demo`` and ``bench``."""

from oocarray._cli._main import main

__all__ = ["main"]
