"""Declares the required C extension; all other metadata lives in pyproject.toml."""

import os

import numpy
from setuptools import Extension, setup

# OOCARRAY_SANITIZE=address,undefined (or thread): a sanitizer build for tools/sanitize.py,
# which builds it into build/sanitize-*/, never over the normal extension.
_SANITIZE = os.environ.get("OOCARRAY_SANITIZE", "")
_SAN_FLAGS = [f"-fsanitize={_SANITIZE}", "-fno-omit-frame-pointer", "-O1", "-g"]
_COMPILE = ["-O2", "-flto"] if not _SANITIZE else _SAN_FLAGS
_LINK = ["-flto", "-O2"] if not _SANITIZE else _SAN_FLAGS

setup(
    ext_modules=[
        Extension(
            "oocarray._native",
            sources=[
                "native/module.c",
                "native/py_numpy.c",
                "native/py_node.c",
                "native/py_pages.c",
                "native/py_pages_remote.c",
                "native/py_counted.c",
                "native/py_handler.c",
                "native/py_spill.c",
                "native/py_scatter.c",
                "native/py_chunks.c",
                "native/py_moments.c",
                "native/node.c",
                "native/block.c",
                "native/alloc_calls.c",
                "native/alloc.c",
                "native/regions.c",
                "native/files.c",
                "native/spill.c",
                "native/workspace.c",
                "native/chunks.c",
                "native/reader.c",
                "native/pool.c",
                "native/source.c",
                "native/codecs.c",
                "native/scratch.c",
                "native/h5filters.c",
                "native/moves.c",
                "native/fork.c",
                "native/physical.c",
                "native/heap.c",
                "native/pager.c",
                "native/pager_reader.c",
                "native/pager_fill.c",
                "native/pager_evict.c",
                "native/pager_arrays.c",
                "native/pager_wb.c",
                "native/pager_spill.c",
                "native/pager_errors.c",
                "native/pager_remote.c",
                "native/pager_feeder.c",
                "native/zspill.c",
                "native/writeback.c",
                "native/moments.c",
                "native/bins.c",
                "native/key_columns.c",
            ],
            libraries=["dl"],  # dlopen of libzstd, libz and codec libraries (part of libc from glibc 2.34)
            depends=[
                "native/oc_core.h",
                "native/oc_regions.h",
                "native/oc_alloc.h",
                "native/oc_files.h",
                "native/oc_spill.h",
                "native/oc_workspace.h",
                "native/oc_chunks.h",
                "native/oc_codecs.h",
                "native/oc_pager.h",
                "native/oc_pool.h",
                "native/oc_source.h",
                "native/oc_reader.h",
                "native/oc_moments.h",
                "native/oc_bins.h",
                "native/oc_keys.h",
                "native/pager_int.h",
                "native/py_module.h",
            ],
            include_dirs=[numpy.get_include(), "native"],
            # Hidden visibility lets calls between the files bind directly, without the PLT.
            extra_compile_args=[
                *_COMPILE,
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-D_GNU_SOURCE",
                "-fvisibility=hidden",
                "-fno-semantic-interposition",
            ],
            extra_link_args=_LINK,
        )
    ],
)
