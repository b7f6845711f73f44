/* The Python type Pages: the object that owns a chunk-backed range (pager.c) and is the base
 * of its ndarrays, with the pager's module functions. */
#include "py_pages.h"
#include "oc_regions.h"
#include "oc_chunks.h"
#include "oc_codecs.h"
#include "oc_pager.h"

#include <fcntl.h>
#include <limits.h>
#include <malloc.h>


/* Pages(paths, table, codec, chunk_nbytes, data_nbytes, unit_nbytes, fill, writable, node,
 *       readahead, fd=-1, zstd_level=0, zstd_checksum=False, file_mode=0o644,
 *       remote_feeder=None): all checked
 *       by the Python caller; table is int64 (nchunks, 3) (an HDF5 chunk's filter mask in bits
 *       32-47 of its path number); fd, when given, is the file every chunk is read from (the
 *       object keeps its own duplicate).  A writable one over chunk files of its own (zarr: no
 *       fd) writes its dirty units back to paths natively (write_back, and under budget
 *       pressure), zstd at that level and checksum (a CRC-32C after, when codec says so), each
 *       new file given file_mode; a writable
 *       one over one file (HDF5) is written back by its store (begin_writeback, the store's
 *       write, end_writeback or abort_writeback; move_begin and move_end around the write).
 *       remote_feeder: an array in an object store (py_pages_remote.c). */
static PyObject *Pages_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"paths", "table", "codec", "chunk_nbytes", "data_nbytes",
                             "unit_nbytes", "fill", "writable", "node", "readahead", "fd",
                             "zstd_level", "zstd_checksum", "file_mode", "remote_feeder", NULL};
    PyObject *paths, *table_obj, *node_obj;
    int codec, writable, readahead, fd = -1, level = 0, checksum = 0, file_mode = 0644;
    PyObject *remote_feeder = Py_None;
    Py_ssize_t chunk_n, data_n, unit_n;
    Py_buffer fill;
    if (oc_pager_errors_init() < 0) { /* what a chunk that cannot be read raises */
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!Oinnny*pOi|iipiO", kwlist, &PyList_Type,
                                     &paths, &table_obj, &codec, &chunk_n, &data_n, &unit_n,
                                     &fill, &writable, &node_obj, &readahead, &fd, &level,
                                     &checksum, &file_mode, &remote_feeder)) {
        return NULL;
    }
    oc_node *node = NULL;
    if (node_obj != Py_None) {
        if (!PyObject_TypeCheck(node_obj, &oc_py_NodeType)) {
            PyBuffer_Release(&fill);
            PyErr_SetString(PyExc_TypeError, "node must be a Node or None");
            return NULL;
        }
        node = ((NodeObject *)node_obj)->node;
    }
    Py_buffer tv;
    if (PyObject_GetBuffer(table_obj, &tv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&fill);
        return NULL;
    }
    size_t page = oc_page_bytes();
    Py_ssize_t npaths = PyList_GET_SIZE(paths);
    size_t nchunks = (size_t)tv.len / 24;
    if (tv.itemsize != 8 || tv.len % 24 != 0 || chunk_n <= 0 || data_n <= 0 || unit_n <= 0 ||
        (size_t)unit_n % page != 0 || fill.len <= 0 || readahead < 0 ||
        nchunks * (size_t)chunk_n < (size_t)data_n ||
        /* written back whole chunks at a time, each in one unit; natively (no fd) to files
         * of their own, raw or zstd */
        (writable && ((size_t)unit_n % (size_t)chunk_n != 0 ||
                      (fd < 0 && (!oc_wb_codec_ok(codec) ||
                                  (file_mode & ~07777) != 0))))) {
        PyBuffer_Release(&tv);
        PyBuffer_Release(&fill);
        PyErr_SetString(PyExc_ValueError, "inconsistent Pages arguments");
        return NULL;
    }
    int64_t *table = malloc((size_t)tv.len);
    char **cpaths = calloc((size_t)(npaths ? npaths : 1), sizeof(char *));
    char *cfill = malloc((size_t)fill.len);
    int bad = table == NULL || cpaths == NULL || cfill == NULL;
    if (!bad) {
        memcpy(table, tv.buf, (size_t)tv.len);
        memcpy(cfill, fill.buf, (size_t)fill.len);
        for (size_t i = 0; i < nchunks; i++) {
            if (table[3 * i] >= 0 && OC_CHUNK_PATH(table[3 * i]) >= npaths) {
                bad = 2;
            }
        }
        for (Py_ssize_t i = 0; i < npaths && !bad; i++) {
            const char *p = PyUnicode_AsUTF8(PyList_GET_ITEM(paths, i));
            if (p == NULL || (cpaths[i] = strdup(p)) == NULL) {
                bad = p == NULL ? 3 : 1;
            }
        }
    }
    size_t fill_n = (size_t)fill.len;
    PyBuffer_Release(&tv);
    PyBuffer_Release(&fill);
    if (bad) {
        for (Py_ssize_t i = 0; cpaths != NULL && i < npaths; i++) {
            free(cpaths[i]);
        }
        free(cpaths);
        free(table);
        free(cfill);
        if (bad == 2) {
            PyErr_SetString(PyExc_ValueError, "a chunk names a path that is not given");
        } else if (bad == 1) {
            PyErr_NoMemory();
        }
        return NULL;
    }
    PagesObject *self = (PagesObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        for (Py_ssize_t i = 0; i < npaths; i++) {
            free(cpaths[i]);
        }
        free(cpaths);
        free(table);
        free(cfill);
        return NULL;
    }
    int own_fd = -1;
    if (fd >= 0 && (own_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        int e = errno;
        for (Py_ssize_t i = 0; i < npaths; i++) {
            free(cpaths[i]);
        }
        free(cpaths);
        free(table);
        free(cfill);
        Py_DECREF(self);
        return oc_py_errno_error(e);
    }
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = oc_pager_create(&self->pages, cpaths, (int)npaths, table, nchunks, codec, (size_t)chunk_n,
                          (size_t)data_n, (size_t)unit_n, cfill, fill_n, writable, node, readahead,
                          own_fd);
    Py_END_ALLOW_THREADS
    if (err) {
        self->pages = NULL;
        Py_DECREF(self);
        return oc_py_errno_error(err);
    }
    if (writable) {
        oc_pager_set_writeback(self->pages, level, checksum, file_mode);
    }
    if (remote_feeder != Py_None && oc_py_pages_set_remote(self, remote_feeder) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void Pages_finalize(PagesObject *self)
{
    PyObject *cb = self->on_release;
    if (cb == NULL || self->pages == NULL) {
        return;
    }
    self->on_release = NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = PyObject_CallOneArg(cb, (PyObject *)self);
    if (r == NULL) {
        PyErr_WriteUnraisable(cb);
    }
    Py_XDECREF(r);
    Py_DECREF(cb);
    PyErr_Restore(type, value, tb);
}

static void Pages_dealloc(PagesObject *self)
{
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0) {
        return; /* the write-back made a new reference: dealloc comes again */
    }
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    Py_CLEAR(self->on_release);
    if (self->pages != NULL) {
        pg_array *p = self->pages;
        self->pages = NULL;
        Py_BEGIN_ALLOW_THREADS
        oc_pager_destroy(p);
        Py_END_ALLOW_THREADS
        if (oc_pager_remote_spent(oc_py_give_back) > 0) { /* what it held of bytes lent */
#ifdef __GLIBC__
            /* The read-ahead's heap trims (oocarray/_storage/_objects/_heap.py) end with the
             * array: what these buffers leave in the C heap goes back to the system now. */
            Py_BEGIN_ALLOW_THREADS
            malloc_trim(0);
            Py_END_ALLOW_THREADS
#endif
        }
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Pages_getbuffer(PagesObject *self, Py_buffer *view, int flags)
{
    int writable = oc_pager_writable(self->pages);
    if ((flags & PyBUF_WRITABLE) && !writable) {
        PyErr_SetString(PyExc_BufferError, "the chunk-backed array is read-only (mode='r')");
        view->obj = NULL;
        return -1;
    }
    self->exports++;
    return PyBuffer_FillInfo(view, (PyObject *)self, oc_pager_base(self->pages),
                             (Py_ssize_t)oc_pager_data_bytes(self->pages), !writable, flags);
}

static void Pages_releasebuffer(PagesObject *self, Py_buffer *Py_UNUSED(view)) { self->exports--; }

static PyBufferProcs Pages_as_buffer = {
    .bf_getbuffer = (getbufferproc)Pages_getbuffer,
    .bf_releasebuffer = (releasebufferproc)Pages_releasebuffer,
};

static PyObject *Pages_stats(PagesObject *self, PyObject *Py_UNUSED(a))
{
    long long s[16];
    oc_pager_stats(self->pages, s);
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsL}", "fills", s[0], "zero_fills", s[1],
                         "readaheads", s[2], "evictions", s[3], "failures", s[4], "faults", s[5],
                         "decoded_bytes", s[6], "resident_bytes", s[7], "dirty_units", s[8],
                         "unit_bytes", s[9], "writebacks", s[10], "writeback_failures", s[11],
                         "handed_over_reads", s[12], "handed_over_bytes", s[13],
                         "feeder_requests", s[14], "feeder_starts", s[15]);
}

static PyObject *Pages_dirty_units(PagesObject *self, PyObject *Py_UNUSED(a))
{
    size_t n = oc_pager_dirty(self->pages, NULL, 0);
    for (;;) {
        size_t *units = PyMem_Malloc((n ? n : 1) * sizeof(size_t));
        if (units == NULL) {
            return PyErr_NoMemory();
        }
        size_t got = oc_pager_dirty(self->pages, units, n);
        if (got > n) {
            PyMem_Free(units);
            n = got;
            continue;
        }
        PyObject *list = PyList_New((Py_ssize_t)got);
        for (size_t i = 0; list != NULL && i < got; i++) {
            PyObject *v = PyLong_FromSize_t(units[i]);
            if (v == NULL) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, v);
        }
        PyMem_Free(units);
        return list;
    }
}

/* write_back(unit) -> chunks written: the unit's chunks, each whole, when it is dirty (after
 * a write-back of it under way elsewhere), without the GIL.  OSError with the errno (ENOSPC on
 * a full disk): the unit stays dirty. */
static PyObject *Pages_write_back(PagesObject *self, PyObject *arg)
{
    Py_ssize_t u = PyLong_AsSsize_t(arg);
    if (u < 0) {
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "unit < 0"), NULL);
    }
    if (!oc_pager_native_writeback(self->pages)) {
        PyErr_SetString(PyExc_ValueError,
                        "this array has no native writer: its store writes it (begin_writeback)");
        return NULL;
    }
    int chunks = 0, err;
    char msg[320] = "";
    Py_BEGIN_ALLOW_THREADS
    err = oc_pager_write_back(self->pages, (size_t)u, &chunks, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (err) {
        PyObject *v = PyUnicode_FromFormat("%s: writing back %s", strerror(err), msg);
        PyObject *e = v == NULL ? NULL : Py_BuildValue("(iN)", err, v);
        if (e != NULL) {
            PyErr_SetObject(PyExc_OSError, e);
            Py_DECREF(e);
        }
        return NULL;
    }
    return PyLong_FromLong(chunks);
}

/* The store's write-back (HDF5), unit by unit; refused for an array written back natively. */
static int store_unit(PagesObject *self, PyObject *arg, size_t *u)
{
    Py_ssize_t v = PyLong_AsSsize_t(arg);
    if (v < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "unit < 0");
        }
        return -1;
    }
    if (oc_pager_native_writeback(self->pages)) {
        PyErr_SetString(PyExc_ValueError, "this array is written back natively: write_back(unit)");
        return -1;
    }
    *u = (size_t)v;
    return 0;
}

static PyObject *Pages_begin_writeback(PagesObject *self, PyObject *arg)
{
    size_t u;
    if (store_unit(self, arg, &u) < 0) {
        return NULL;
    }
    int r = oc_pager_begin_writeback(self->pages, u);
    if (r < 0) {
        return oc_py_errno_error(-r);
    }
    return PyBool_FromLong(r);
}

static PyObject *Pages_abort_writeback(PagesObject *self, PyObject *arg)
{
    size_t u;
    if (store_unit(self, arg, &u) < 0) {
        return NULL;
    }
    oc_pager_abort_writeback(self->pages, u);
    Py_RETURN_NONE;
}

static PyObject *Pages_end_writeback(PagesObject *self, PyObject *arg)
{
    size_t u;
    if (store_unit(self, arg, &u) < 0) {
        return NULL;
    }
    oc_pager_end_writeback(self->pages, u);
    Py_RETURN_NONE;
}

static PyObject *Pages_move_begin(PagesObject *self, PyObject *args)
{
    Py_ssize_t chunk;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "ny*", &chunk, &data)) {
        return NULL;
    }
    if (chunk < 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "chunk < 0");
        return NULL;
    }
    uint64_t id = oc_pager_move_begin(self->pages, (size_t)chunk, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return id == 0 ? PyErr_NoMemory() : PyLong_FromUnsignedLongLong(id);
}

static PyObject *Pages_move_end(PagesObject *self, PyObject *args)
{
    unsigned long long id;
    PyObject *entry_obj;
    int64_t entry[3];
    if (!PyArg_ParseTuple(args, "KO", &id, &entry_obj)) {
        return NULL;
    }
    if (entry_obj != Py_None &&
        !PyArg_ParseTuple(entry_obj, "LLL", (long long *)&entry[0], (long long *)&entry[1],
                          (long long *)&entry[2])) {
        return NULL;
    }
    if (oc_pager_move_end(self->pages, id, entry_obj == Py_None ? NULL : entry) != 0) {
        PyErr_Format(PyExc_ValueError, "no move %llu of this array", id);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Pages_trim(PagesObject *self, PyObject *Py_UNUSED(a))
{
    size_t freed;
    Py_BEGIN_ALLOW_THREADS
    freed = oc_pager_trim(self->pages);
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(freed);
}

static PyObject *Pages_prefetch(PagesObject *self, PyObject *args)
{
    Py_ssize_t first, last;
    if (!PyArg_ParseTuple(args, "nn", &first, &last)) {
        return NULL;
    }
    if (first >= 0 && last > first) {
        oc_pager_prefetch(self->pages, (size_t)first, (size_t)last);
    }
    Py_RETURN_NONE;
}

static PyObject *Pages_get_error(PagesObject *self, void *Py_UNUSED(c))
{
    const char *e = oc_pager_error(self->pages);
    return e[0] ? PyUnicode_FromString(e) : Py_NewRef(Py_None);
}

static PyObject *Pages_get_writeback_error(PagesObject *self, void *Py_UNUSED(c))
{
    char e[400];
    oc_pager_writeback_error(self->pages, e, sizeof e);
    return e[0] ? PyUnicode_FromString(e) : Py_NewRef(Py_None);
}

static PyObject *Pages_get_native_writeback(PagesObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(oc_pager_native_writeback(self->pages));
}

static PyObject *Pages_get_address(PagesObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromVoidPtr(oc_pager_base(self->pages));
}

static PyMethodDef Pages_methods[] = {
    {"stats", (PyCFunction)Pages_stats, METH_NOARGS, "Counters of fills, evictions and faults."},
    {"dirty_units", (PyCFunction)Pages_dirty_units, METH_NOARGS, "Units written since their last write-back."},
    {"write_back", (PyCFunction)Pages_write_back, METH_O, "Write a dirty unit's chunks back natively, each whole; the chunks written."},
    {"begin_writeback", (PyCFunction)Pages_begin_writeback, METH_O, "The store writes a unit: mark it clean, write-protect and hold it; whether it was dirty."},
    {"abort_writeback", (PyCFunction)Pages_abort_writeback, METH_O, "The store's write failed: the unit is dirty again."},
    {"end_writeback", (PyCFunction)Pages_end_writeback, METH_O, "A unit's chunks are stored: it may be dropped again."},
    {"move_begin", (PyCFunction)Pages_move_begin, METH_VARARGS, "move_begin(chunk, data) -> id: the store rewrites a chunk; fills copy data meanwhile."},
    {"move_end", (PyCFunction)Pages_move_end, METH_VARARGS, "move_end(id, (path, offset, stored) or None): the chunk is stored there."},
    {"trim", (PyCFunction)Pages_trim, METH_NOARGS, "Drop every clean resident unit; the bytes released."},
    {"prefetch", (PyCFunction)Pages_prefetch, METH_VARARGS, "Queue fills of units [first, last)."},
    {"remote_token", (PyCFunction)oc_py_pages_remote_token, METH_NOARGS, "What names a remote array to pager_stop_feeder."},
    {"remote_give", (PyCFunction)oc_py_pages_remote_give, METH_VARARGS, "remote_give(chunk, data): a remote array's chunk's stored bytes, lent to its fills (a buffer of data held, not copied, until they are done with it); the bytes of buffers given back."},
    {"remote_keep", (PyCFunction)oc_py_pages_remote_keep, METH_VARARGS, "remote_keep(lo, hi): let go of the chunks handed over outside [lo, hi); the bytes of buffers given back."},
    {"remote_position", (PyCFunction)oc_py_pages_remote_position, METH_NOARGS, "The chunk of a remote array's latest fill, -1 before the first."},
    {"remote_progress", (PyCFunction)oc_py_pages_remote_progress, METH_O, "remote_progress(eventfd or -1): written when a remote array's fills move to another chunk; -1: no lender follows them any more."},
    {"remote_absent", (PyCFunction)oc_py_pages_remote_absent, METH_O, "remote_absent(chunk): a remote array's chunk was never written (its fills read the fill value)."},
    {NULL},
};

static PyObject *Pages_get_on_release(PagesObject *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->on_release ? self->on_release : Py_None);
}

static int Pages_set_on_release(PagesObject *self, PyObject *v, void *Py_UNUSED(c))
{
    Py_XSETREF(self->on_release, v == NULL || v == Py_None ? NULL : Py_NewRef(v));
    return 0;
}

static PyGetSetDef Pages_getset[] = {
    {"on_release", (getter)Pages_get_on_release, (setter)Pages_set_on_release, "cb(pages), called once when the last view is gone.", NULL},
    {"error", (getter)Pages_get_error, NULL, "Why the last failed fill failed, or None.", NULL},
    {"address", (getter)Pages_get_address, NULL, "Where the data starts.", NULL},
    {"writeback_error", (getter)Pages_get_writeback_error, NULL, "Why the last write-back under memory pressure failed, or None.", NULL},
    {"native_writeback", (getter)Pages_get_native_writeback, NULL, "Whether dirty units are written back natively (zarr r+), not by the store (HDF5 r+).", NULL},
    {NULL},
};

PyTypeObject oc_py_PagesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "oocarray._native.Pages",
    .tp_basicsize = sizeof(PagesObject),
    .tp_dealloc = (destructor)Pages_dealloc,
    .tp_finalize = (destructor)Pages_finalize,
    .tp_weaklistoffset = offsetof(PagesObject, weakreflist),
    .tp_as_buffer = &Pages_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An address range filled from chunks on first touch; the base of its ndarrays.",
    .tp_new = Pages_new,
    .tp_methods = Pages_methods,
    .tp_getset = Pages_getset,
};

static PyObject *pager_take_fault(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    char msg[512];
    oc_pager_take_fault(msg, sizeof msg);
    return msg[0] ? PyUnicode_FromString(msg) : Py_NewRef(Py_None);
}

static PyObject *pager_check(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    int wp = 0;
    int err = oc_pager_check(&wp, NULL);
    return Py_BuildValue("(iO)", err, wp ? Py_True : Py_False);
}

static PyObject *pager_threads(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLong(atomic_load(&oc_pager_threads));
}

PyMethodDef oc_py_pages_methods[] = {
    {"pager_check", pager_check, METH_NOARGS, "(errno or 0, write-protect faults?) of opening a kernel-mode userfaultfd."},
    {"pager_take_fault", pager_take_fault, METH_NOARGS, "This thread's pager failure (None if none), taken; failed units are dropped."},
    {"pager_threads", pager_threads, METH_NOARGS, "Threads serving chunk-backed arrays now."},
    {NULL, NULL, 0, NULL},
};
