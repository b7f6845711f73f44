/*
 * The module oocarray._native: its definition, init and constants.  The types and the
 * functions live with what they expose: py_node.c (Node), py_pages.c (Pages, the pager),
 * py_handler.c (the handler, blocks and memory settings), py_spill.c (spill and moves),
 * py_chunks.c (the chunk reader and the codecs), py_moments.c (compute kernels).
 */
#include "py_module.h"
#include "oc_alloc.h"
#include "oc_codecs.h"

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "oocarray._native",
    .m_doc = "oocarray's native NEP 49 allocation handler.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (oc_py_numpy_import() < 0) {
        return NULL;
    }
    if (PyType_Ready(&oc_py_NodeType) < 0 || PyType_Ready(&oc_py_PagesType) < 0 ||
        PyType_Ready(&oc_py_CountedType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) {
        return NULL;
    }
    oc_fork_install();
    if (PyModule_AddFunctions(m, oc_py_handler_methods) < 0 ||
        PyModule_AddFunctions(m, oc_py_spill_methods) < 0 ||
        PyModule_AddFunctions(m, oc_py_scatter_methods) < 0 ||
        PyModule_AddFunctions(m, oc_py_pages_methods) < 0 ||
        PyModule_AddFunctions(m, oc_py_pages_remote_methods) < 0 ||
        PyModule_AddFunctions(m, oc_py_chunks_methods) < 0 ||
        PyModule_AddFunctions(m, oc_py_moments_methods) < 0 ||
        PyModule_AddObjectRef(m, "Node", (PyObject *)&oc_py_NodeType) < 0 ||
        PyModule_AddObjectRef(m, "Pages", (PyObject *)&oc_py_PagesType) < 0 ||
        PyModule_AddObjectRef(m, "Counted", (PyObject *)&oc_py_CountedType) < 0 ||
        PyModule_AddIntConstant(m, "HEADER_BYTES", OC_HEADER_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_REGION", OC_FLAG_REGION) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_KEPT", OC_FLAG_KEPT) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_TRACED", OC_FLAG_TRACED) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_BUDGET", OC_FAIL_BUDGET) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_CLOSED", OC_FAIL_CLOSED) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_OS", OC_FAIL_OS) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_SPILL", OC_FAIL_SPILL) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_SPILLED", OC_FLAG_SPILLED) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_ZSPILLED", OC_FLAG_ZSPILLED) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_ZARR", OC_SPILL_ZARR) < 0 ||
        PyModule_AddIntConstant(m, "LOCATION_ZARR", OC_LOCATION_ZARR) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_MAPPED", OC_FLAG_MAPPED) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_FAIL", OC_SPILL_FAIL) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_MMAP", OC_SPILL_MMAP) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_EVICT", OC_SPILL_EVICT) < 0 ||
        PyModule_AddIntConstant(m, "LOCATION_RAM", OC_LOCATION_RAM) < 0 ||
        PyModule_AddIntConstant(m, "LOCATION_MMAP", OC_LOCATION_MMAP) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_ARENA", OC_FLAG_ARENA) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_COW", OC_FLAG_COW) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_AUTO", OC_GUARD_AUTO) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_SIGNAL", OC_GUARD_SIGNAL) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_UFFD_USER", OC_GUARD_UFFD_USER) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_UFFD", OC_GUARD_UFFD) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_CYCLE_EXTERNAL", OC_FLAG_CYCLE_EXTERNAL) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_RAW", OC_CODEC_RAW) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_ZSTD", OC_CODEC_ZSTD) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_H5", OC_CODEC_H5) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_BLOSC", OC_CODEC_BLOSC) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_GZIP", OC_CODEC_GZIP) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_LZ4", OC_CODEC_LZ4) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_CRC32C", OC_CODEC_CRC32C) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_VERIFY", OC_CODEC_VERIFY) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_RANDOM", OC_CODEC_RANDOM) < 0 ||
        PyModule_AddIntConstant(m, "LIB_ZSTD", OC_LIB_ZSTD) < 0 ||
        PyModule_AddIntConstant(m, "LIB_BLOSC", OC_LIB_BLOSC) < 0 ||
        PyModule_AddIntConstant(m, "LIB_LZ4", OC_LIB_LZ4) < 0 ||
        PyModule_AddIntConstant(m, "LIB_CRC32C", OC_LIB_CRC32C) < 0 ||
        PyModule_AddIntConstant(m, "H5_SHUFFLE", OC_H5_SHUFFLE) < 0 ||
        PyModule_AddIntConstant(m, "H5_DEFLATE", OC_H5_DEFLATE) < 0 ||
        PyModule_AddIntConstant(m, "H5_FLETCHER32", OC_H5_FLETCHER32) < 0 ||
        PyModule_AddIntConstant(m, "H5_MAX_STEPS", OC_H5_MAX_STEPS) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_WORKSPACE_FULL", OC_FAIL_WORKSPACE_FULL) < 0 ||
        PyModule_AddIntConstant(m, "WS_EXTERNAL", OC_WS_EXTERNAL) < 0 ||
        PyModule_AddIntConstant(m, "WS_REALLOCATE", OC_WS_REALLOCATE) < 0 ||
        PyModule_AddIntConstant(m, "WS_FAIL", OC_WS_FAIL) < 0 ||
        PyModule_AddIntConstant(m, "WS_MODE_NORMAL", OC_WS_MODE_NORMAL) < 0 ||
        PyModule_AddIntConstant(m, "WS_MODE_BYPASS", OC_WS_MODE_BYPASS) < 0 ||
        PyModule_AddIntConstant(m, "WS_MODE_SPILL_EVERYTHING", OC_WS_MODE_SPILL_EVERYTHING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
