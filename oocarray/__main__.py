"""``python -m oocarray``: the ``oocarray`` command line."""

import sys

from oocarray._cli import main

sys.exit(main())
