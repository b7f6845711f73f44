"""The Array API standard namespace (2024.12) of oocarray's chunked arrays and expressions.

``x.__array_namespace__()`` of any :class:`~oocarray.ChunkedArray` or :class:`~oocarray.Expr`
is this module, so code written against the standard (``xp = x.__array_namespace__()``) runs
out of core.  The functions live in the compute layer (``oocarray._compute._namespace``); this
module re-exports them and registers itself as the arrays' namespace.

Examples
--------
>>> import numpy as np, oocarray as oc
>>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 2))
>>> xp = x.__array_namespace__()
>>> xp.__name__, xp.__array_api_version__
('oocarray.array_api', '2024.12')
>>> np.asarray(xp.sum(xp.sqrt(x), axis=0)).round(3)
array([1.732, 3.   , 3.65 ])
"""

import sys

from oocarray._compute._namespace import *  # noqa: F403
from oocarray._compute._namespace import __all__ as __all__
from oocarray._compute._namespace import __array_api_version__ as __array_api_version__
from oocarray._compute._namespace import (
    __array_namespace_info__ as __array_namespace_info__,
)
from oocarray._compute._standard import use_namespace

use_namespace(sys.modules[__name__])
