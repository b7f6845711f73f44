"""oocarray in xarray: the ``engine="oocarray"`` backend that opens datasets through oocarray's
chunk reader, and the ``chunked_array_type="oocarray"`` chunk manager that computes them on the
streaming engine inside the active manager's budget.  xarray finds both through entry points
(``pyproject.toml``), so importing oocarray never imports xarray."""
