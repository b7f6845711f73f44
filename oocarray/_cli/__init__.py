"""The ``oocarray`` command."""

from oocarray._cli._main import main

__all__ = ["main"]
