/* Compiled loops over a batch's token ids, without the GIL (one pass each, no index copies):
 *
 * ``flagged(table, ids, lengths)``: the texts (int64 indices, as bytes) whose int32 ``ids`` (cut by the int64
 * ``lengths``) hold an id the uint8 ``table`` flags; an id outside the table is an error.
 * ``holds_flagged(table, text)``: whether ``text`` (a str) holds a code point the uint8 ``table`` flags.
 * ``frame(ids, lengths, keep, before, after, itemsize)``: the int32 ``ids`` of the texts ``keep`` (uint8)
 * keeps, each between the ``before`` and ``after`` ids, as unsigned ints of ``itemsize`` bytes (2 or 4), and
 * each kept text's framed count (int64); an id that does not fit is an error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int buffer(PyObject *obj, Py_buffer *view, Py_ssize_t item, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)) return -1;
    if (view->len % item) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of items", what, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *flagged(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *table_obj, *ids_obj, *lengths_obj, *result = NULL;
    Py_buffer table, ids, lengths;
    if (!PyArg_ParseTuple(args, "OOO", &table_obj, &ids_obj, &lengths_obj)) return NULL;
    if (buffer(table_obj, &table, 1, "table")) return NULL;
    if (buffer(ids_obj, &ids, 4, "ids")) goto release_table;
    if (buffer(lengths_obj, &lengths, 8, "lengths")) goto release_ids;
    const uint8_t *flags = table.buf;
    const int32_t *id = ids.buf;
    const int64_t *len = lengths.buf;
    Py_ssize_t n_ids = ids.len / 4, n_texts = lengths.len / 8, n_out = 0, total = 0, bad = -1;
    int64_t *out = PyMem_Malloc((size_t)(n_texts + 1) * sizeof(int64_t));
    if (!out) {
        PyErr_NoMemory();
        goto release;
    }
    for (Py_ssize_t t = 0; t < n_texts; t++) total += len[t];
    if (total != n_ids) {
        PyErr_Format(PyExc_ValueError, "lengths sum to %zd but %zd ids were given", total, n_ids);
        goto release_out;
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = 0;
    for (Py_ssize_t t = 0; t < n_texts && bad < 0; t++) {
        Py_ssize_t end = at + (Py_ssize_t)len[t];
        uint8_t hit = 0;
        for (; at < end; at++) {
            uint32_t v = (uint32_t)id[at];
            if (v >= (uint32_t)table.len) {
                bad = at;
                break;
            }
            hit |= flags[v];
        }
        if (hit) out[n_out++] = t;
        at = end;
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0)
        PyErr_Format(PyExc_ValueError, "token id %d is outside the vocabulary (%zd)", id[bad], table.len);
    else
        result = PyBytes_FromStringAndSize((const char *)out, n_out * (Py_ssize_t)sizeof(int64_t));
release_out:
    PyMem_Free(out);
release:
    PyBuffer_Release(&lengths);
release_ids:
    PyBuffer_Release(&ids);
release_table:
    PyBuffer_Release(&table);
    return result;
}

static PyObject *holds_flagged(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *table_obj, *text;
    Py_buffer table;
    if (!PyArg_ParseTuple(args, "OU", &table_obj, &text)) return NULL;
    if (buffer(table_obj, &table, 1, "table")) return NULL;
    const uint8_t *flags = table.buf;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), size = table.len;
    int kind = PyUnicode_KIND(text), hit = 0;
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < n && !hit; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        hit = (Py_ssize_t)c >= size || flags[c];
    }
    PyBuffer_Release(&table);
    return PyBool_FromLong(hit);
}

static int read_ids(PyObject *list, int64_t *out, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static PyObject *frame(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *ids_obj, *lengths_obj, *keep_obj, *before_obj, *after_obj, *result = NULL;
    int itemsize;
    Py_buffer ids, lengths, keep;
    if (!PyArg_ParseTuple(args, "OOOO!O!i", &ids_obj, &lengths_obj, &keep_obj, &PyList_Type, &before_obj,
                          &PyList_Type, &after_obj, &itemsize))
        return NULL;
    if (itemsize != 2 && itemsize != 4) return PyErr_Format(PyExc_ValueError, "itemsize %d: 2 or 4", itemsize);
    Py_ssize_t nb = PyList_GET_SIZE(before_obj), na = PyList_GET_SIZE(after_obj);
    int64_t around[64];
    if (nb + na > 64) return PyErr_Format(PyExc_ValueError, "at most 64 ids around a text");
    if (read_ids(before_obj, around, nb) || read_ids(after_obj, around + nb, na)) return NULL;
    if (buffer(ids_obj, &ids, 4, "ids")) return NULL;
    if (buffer(lengths_obj, &lengths, 8, "lengths")) goto release_ids;
    if (buffer(keep_obj, &keep, 1, "keep")) goto release_lengths;
    const int32_t *id = ids.buf;
    const int64_t *len = lengths.buf;
    const uint8_t *kept = keep.buf;
    Py_ssize_t n_ids = ids.len / 4, n_texts = lengths.len / 8, total = 0, n_kept = 0, n_out = 0;
    uint64_t limit = itemsize == 2 ? UINT16_MAX : INT32_MAX, bad_value = 0; /* int32 files: no negative id */
    int bad = 0;
    if (keep.len != n_texts) {
        PyErr_Format(PyExc_ValueError, "keep has %zd entries for %zd texts", keep.len, n_texts);
        goto release_keep;
    }
    for (Py_ssize_t i = 0; i < nb + na; i++)
        if (around[i] < 0 || (uint64_t)around[i] > limit) {
            PyErr_Format(PyExc_ValueError, "token id %lld does not fit %d bytes", (long long)around[i], itemsize);
            goto release_keep;
        }
    for (Py_ssize_t t = 0; t < n_texts; t++) {
        total += len[t];
        if (kept[t]) n_kept++, n_out += len[t] + nb + na;
    }
    if (total != n_ids) {
        PyErr_Format(PyExc_ValueError, "lengths sum to %zd but %zd ids were given", total, n_ids);
        goto release_keep;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n_out * itemsize);
    PyObject *counts = PyBytes_FromStringAndSize(NULL, n_kept * (Py_ssize_t)sizeof(int64_t));
    if (!out || !counts) {
        Py_XDECREF(out), Py_XDECREF(counts);
        goto release_keep;
    }
    char *o = PyBytes_AS_STRING(out);
    int64_t *count = (int64_t *)PyBytes_AS_STRING(counts);
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = 0, w = 0, k = 0;
    uint64_t seen = 0; /* every id written, or'ed: its high bits tell a misfit */
    for (Py_ssize_t t = 0; t < n_texts; t++) {
        Py_ssize_t n = (Py_ssize_t)len[t];
        if (!kept[t]) {
            at += n;
            continue;
        }
        count[k++] = n + nb + na;
        for (int pass = 0; pass < 3; pass++) {
            const int64_t *extra = pass == 0 ? around : around + nb;
            Py_ssize_t m = pass == 0 ? nb : pass == 2 ? na : n;
            for (Py_ssize_t i = 0; i < m; i++) {
                uint32_t v = pass == 1 ? (uint32_t)id[at + i] : (uint32_t)extra[i];
                seen |= v;
                if (itemsize == 2) ((uint16_t *)o)[w + i] = (uint16_t)v;
                else ((uint32_t *)o)[w + i] = v;
            }
            w += m;
        }
        at += n;
    }
    if (seen > limit) { /* find the first misfit, for the message */
        bad = 1;
        for (Py_ssize_t i = 0; i < n_ids; i++)
            if ((uint32_t)id[i] > limit) {
                bad_value = (uint64_t)(int64_t)id[i];
                break;
            }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_Format(PyExc_ValueError, "token id %lld does not fit %d bytes", (long long)(int32_t)bad_value,
                     itemsize);
        Py_DECREF(out), Py_DECREF(counts);
    } else {
        result = PyTuple_Pack(2, out, counts);
        Py_DECREF(out), Py_DECREF(counts);
    }
release_keep:
    PyBuffer_Release(&keep);
release_lengths:
    PyBuffer_Release(&lengths);
release_ids:
    PyBuffer_Release(&ids);
    return result;
}

static PyMethodDef methods[] = {
    {"flagged", flagged, METH_VARARGS, "The texts whose ids hold a flagged id (see the module's comment)."},
    {"holds_flagged", holds_flagged, METH_VARARGS, "Whether a str holds a flagged code point."},
    {"frame", frame, METH_VARARGS, "The kept texts' ids framed, in the file's dtype."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_ids", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__ids(void) { return PyModule_Create(&module); }
