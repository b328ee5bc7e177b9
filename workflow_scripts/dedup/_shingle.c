/* Dedup's per-character work in C: unit hashes, shingle hashes and MinHash signatures (dedup/text.py
 * documents the hashes; these give the same numbers, one pass each, without the GIL).
 *
 * units(texts, char_docs, sep, digit, digits) -> (hashes, counts)
 *     texts: list of str (already NFKC-normalized and lowercased as the settings ask); char_docs: one byte
 *     per text (1: every non-separator character is a unit); sep, digit: one byte per code point
 *     (0x110000); digits: collapse every number to "0". hashes: uint64 bytes, every unit's hash in order;
 *     counts: int64 bytes, the units of each text.
 * shingles(hashes, off, width) -> bytes
 *     uint64 hashes of the shingles of each document's units (CSR ``off``, int64), ``width[d]`` units each
 *     (int64; the whole document when it has fewer), in order.
 * find(text, table, start) -> int
 *     the index of the first character at or after ``start`` whose byte in ``table`` (one per code point,
 *     0x110000) is set, or -1.
 * minhash(values, off, a, b) -> bytes
 *     (documents, permutations) uint32 signatures of the CSR sets of uint32 ``values``: the minimum over
 *     the set of a * fmix32(v) + b mod 2**32 per permutation; an empty set gives 2**32 - 1.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BASE 0x100000001B3ULL
#define GRAM 0x9E3779B97F4A7C15ULL
#define PERM_BLOCK 64 /* shingles mixed at once in minhash */

static inline uint64_t fmix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6BU;
    h ^= h >> 13;
    h *= 0xC2B2AE35U;
    return h ^ (h >> 16);
}

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t len;
} Text;

/* Growable uint64 output. */
typedef struct {
    uint64_t *v;
    size_t n, cap;
} Out;

static int out_push(Out *o, uint64_t x) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 1 << 16;
        uint64_t *v = realloc(o->v, cap * sizeof(uint64_t));
        if (!v) return -1;
        o->v = v, o->cap = cap;
    }
    o->v[o->n++] = x;
    return 0;
}

/* The units of one text: numbers collapsed to "0" (digits plus a single '.' or ',' between two digits;
 * only a number's first character stays), then runs of non-separators (each non-separator when char_doc),
 * each hashed as sum(c * BASE**i) + length, finished by fmix64. Returns the unit count, or -1 (memory). */
static inline __attribute__((always_inline)) Py_ssize_t
text_units_of(const int kind, const Text *t, int char_doc, const uint8_t *sep, const uint8_t *digit, int digits,
              Out *out) {
    Py_ssize_t count = 0, len = 0;
    uint64_t h = 0, pw = 1;
    int prev_num = 0, in_unit = 0;
    for (Py_ssize_t i = 0; i < t->len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, t->data, i);
        if (digits) {
            int d = digit[c];
            int num = d;
            if (!d && (c == '.' || c == ',') && i > 0 && i + 1 < t->len)
                num = digit[PyUnicode_READ(kind, t->data, i - 1)] &&
                      digit[PyUnicode_READ(kind, t->data, i + 1)];
            if (num && prev_num) continue; /* inside a number: dropped */
            prev_num = num;
            if (d) c = '0';
        }
        if (sep[c]) {
            if (in_unit) {
                if (out_push(out, fmix64(h + (uint64_t)len)) < 0) return -1;
                count++, in_unit = 0;
            }
            continue;
        }
        if (in_unit && char_doc) {
            if (out_push(out, fmix64(h + (uint64_t)len)) < 0) return -1;
            count++, in_unit = 0;
        }
        if (!in_unit) h = 0, pw = 1, len = 0, in_unit = 1;
        h += (uint64_t)c * pw;
        pw *= BASE;
        len++;
    }
    if (in_unit) {
        if (out_push(out, fmix64(h + (uint64_t)len)) < 0) return -1;
        count++;
    }
    return count;
}

/* text_units_of, compiled once per string kind (1, 2 or 4 bytes a character). */
static Py_ssize_t text_units(const Text *t, int char_doc, const uint8_t *sep, const uint8_t *digit, int digits,
                             Out *out) {
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND:
        return text_units_of(PyUnicode_1BYTE_KIND, t, char_doc, sep, digit, digits, out);
    case PyUnicode_2BYTE_KIND:
        return text_units_of(PyUnicode_2BYTE_KIND, t, char_doc, sep, digit, digits, out);
    default:
        return text_units_of(PyUnicode_4BYTE_KIND, t, char_doc, sep, digit, digits, out);
    }
}

static int table(PyObject *obj, Py_buffer *view, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (view->len < 0x110000) {
        PyErr_Format(PyExc_ValueError, "%s: one byte per code point (0x110000) expected", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *units(PyObject *self, PyObject *args) {
    PyObject *texts, *char_obj, *sep_obj, *digit_obj;
    int digits;
    if (!PyArg_ParseTuple(args, "O!OOOp", &PyList_Type, &texts, &char_obj, &sep_obj, &digit_obj, &digits))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(texts);
    Py_buffer chars, sep, digit;
    if (PyObject_GetBuffer(char_obj, &chars, PyBUF_SIMPLE) < 0) return NULL;
    if (chars.len != n) {
        PyBuffer_Release(&chars);
        return PyErr_Format(PyExc_ValueError, "char_docs: %zd bytes for %zd texts", chars.len, n);
    }
    if (table(sep_obj, &sep, "sep") < 0) {
        PyBuffer_Release(&chars);
        return NULL;
    }
    if (table(digit_obj, &digit, "digit") < 0) {
        PyBuffer_Release(&chars), PyBuffer_Release(&sep);
        return NULL;
    }
    PyObject *result = NULL, *counts_bytes = NULL;
    Text *items = PyMem_Malloc((n ? n : 1) * sizeof(Text));
    Out out = {0};
    if (!items) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(texts, i);
        if (!PyUnicode_Check(s)) {
            PyErr_Format(PyExc_TypeError, "texts[%zd] is not a str", i);
            goto done;
        }
        items[i] = (Text){PyUnicode_KIND(s), PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s)};
    }
    counts_bytes = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!counts_bytes) goto done;
    int64_t *counts = (int64_t *)PyBytes_AS_STRING(counts_bytes);
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        Py_ssize_t c = text_units(&items[i], ((const uint8_t *)chars.buf)[i] != 0, sep.buf, digit.buf,
                                  digits, &out);
        if (c < 0) failed = 1;
        counts[i] = c;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *hashes = PyBytes_FromStringAndSize((const char *)out.v, out.n * sizeof(uint64_t));
    if (hashes) result = Py_BuildValue("NO", hashes, counts_bytes);
done:
    Py_XDECREF(counts_bytes);
    free(out.v);
    PyMem_Free(items);
    PyBuffer_Release(&chars), PyBuffer_Release(&sep), PyBuffer_Release(&digit);
    return result;
}

/* The buffers of objs[0..n), each a whole number of items[i]-byte items; on failure none is held. */
static int get_all(int n, PyObject *const *objs, Py_buffer *views, const Py_ssize_t *items,
                   const char *const *names) {
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(objs[i], &views[i], PyBUF_SIMPLE) == 0 && views[i].len % items[i] == 0) continue;
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "%s: not a whole number of %zd-byte items", names[i], items[i]);
            PyBuffer_Release(&views[i]);
        }
        while (i-- > 0) PyBuffer_Release(&views[i]);
        return -1;
    }
    return 0;
}

static void release_all(int n, Py_buffer *views) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

static PyObject *shingles(PyObject *self, PyObject *args) {
    PyObject *objs[3];
    Py_buffer views[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2])) return NULL;
    if (get_all(3, objs, views, (Py_ssize_t[]){8, 8, 8}, (const char *[]){"hashes", "off", "width"}) < 0)
        return NULL;
    Py_buffer hb = views[0], ob = views[1], wb = views[2];
    PyObject *result = NULL;
    const uint64_t *h = hb.buf;
    const int64_t *off = ob.buf, *width = wb.buf;
    Py_ssize_t docs = ob.len / 8 - 1, total = 0;
    if (docs < 0 || wb.len / 8 != docs || (docs > 0 && off[docs] > hb.len / 8)) {
        PyErr_SetString(PyExc_ValueError, "off, width and hashes do not agree");
        goto done;
    }
    for (Py_ssize_t d = 0; d < docs; d++) {
        int64_t m = off[d + 1] - off[d], w = m < width[d] ? m : width[d];
        if (m > 0) total += m - w + 1;
    }
    result = PyBytes_FromStringAndSize(NULL, total * 8);
    if (!result) goto done;
    uint64_t *out = (uint64_t *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t d = 0; d < docs; d++) {
        int64_t m = off[d + 1] - off[d], w = m < width[d] ? m : width[d];
        for (int64_t s = 0; m > 0 && s <= m - w; s++) {
            uint64_t acc = 0, mult = 1;
            for (int64_t k = 0; k < w; k++) acc += h[off[d] + s + k] * mult, mult *= GRAM;
            *out++ = fmix64(acc);
        }
    }
    Py_END_ALLOW_THREADS
done:
    release_all(3, views);
    return result;
}

/* The signatures of documents [0, docs): the hot loop, built for AVX2 too where the compiler can (picked at
 * run time), since plain x86-64 has no vector 32-bit multiply or unsigned minimum. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
static void sign(const uint32_t *values, const int64_t *off, Py_ssize_t docs, const uint32_t *a,
                 const uint32_t *b, Py_ssize_t perms, uint32_t *sig) {
    uint32_t mixed[PERM_BLOCK];
    for (Py_ssize_t d = 0; d < docs; d++) {
        uint32_t *row = sig + d * perms;
        for (Py_ssize_t k = 0; k < perms; k++) row[k] = UINT32_MAX;
        for (int64_t lo = off[d]; lo < off[d + 1]; lo += PERM_BLOCK) {
            int64_t hi = lo + PERM_BLOCK < off[d + 1] ? lo + PERM_BLOCK : off[d + 1];
            for (int64_t i = lo; i < hi; i++) mixed[i - lo] = fmix32(values[i]);
            for (int64_t i = 0; i < hi - lo; i++) {
                uint32_t x = mixed[i];
                for (Py_ssize_t k = 0; k < perms; k++) {
                    uint32_t y = a[k] * x + b[k];
                    row[k] = y < row[k] ? y : row[k];
                }
            }
        }
    }
}

static PyObject *minhash(PyObject *self, PyObject *args) {
    PyObject *objs[4];
    Py_buffer views[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3])) return NULL;
    if (get_all(4, objs, views, (Py_ssize_t[]){4, 8, 4, 4}, (const char *[]){"values", "off", "a", "b"}) < 0)
        return NULL;
    Py_buffer vb = views[0], ob = views[1], ab = views[2], bb = views[3];
    PyObject *result = NULL;
    const uint32_t *values = vb.buf, *a = ab.buf, *b = bb.buf;
    const int64_t *off = ob.buf;
    Py_ssize_t docs = ob.len / 8 - 1, perms = ab.len / 4;
    if (docs < 0 || bb.len / 4 != perms || (docs > 0 && off[docs] > vb.len / 4)) {
        PyErr_SetString(PyExc_ValueError, "off, values and the permutations do not agree");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, docs * perms * 4);
    if (!result) goto done;
    uint32_t *sig = (uint32_t *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    sign(values, off, docs, a, b, perms, sig);
    Py_END_ALLOW_THREADS
done:
    release_all(4, views);
    return result;
}

/* |A & B| of pairs of sorted, duplicate-free uint32 sets (CSR values/off; left[k], right[k] index sets). */
static PyObject *intersections(PyObject *self, PyObject *args) {
    PyObject *objs[4];
    Py_buffer views[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3])) return NULL;
    if (get_all(4, objs, views, (Py_ssize_t[]){4, 8, 8, 8}, (const char *[]){"values", "off", "left", "right"}) < 0)
        return NULL;
    Py_buffer vb = views[0], ob = views[1], lb = views[2], rb = views[3];
    PyObject *result = NULL;
    const uint32_t *values = vb.buf;
    const int64_t *off = ob.buf, *left = lb.buf, *right = rb.buf;
    Py_ssize_t sets = ob.len / 8 - 1, pairs = lb.len / 8;
    int bad = sets < 0 || rb.len / 8 != pairs || (sets > 0 && off[sets] > vb.len / 4);
    for (Py_ssize_t k = 0; !bad && k < pairs; k++)
        bad = left[k] < 0 || left[k] >= sets || right[k] < 0 || right[k] >= sets;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "off, values and the pairs do not agree");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, pairs * 8);
    if (!result) goto done;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < pairs; k++) {
        const uint32_t *a = values + off[left[k]], *a_end = values + off[left[k] + 1];
        const uint32_t *b = values + off[right[k]], *b_end = values + off[right[k] + 1];
        int64_t n = 0;
        while (a < a_end && b < b_end) {
            if (*a < *b) a++;
            else if (*b < *a) b++;
            else n++, a++, b++;
        }
        out[k] = n;
    }
    Py_END_ALLOW_THREADS
done:
    release_all(4, views);
    return result;
}

static PyObject *find(PyObject *self, PyObject *args) {
    PyObject *text, *table_obj;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "UOn", &text, &table_obj, &start)) return NULL;
    Py_buffer view;
    if (table(table_obj, &view, "table") < 0) return NULL;
    const uint8_t *marked = view.buf;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), found = -1;
    for (Py_ssize_t i = start < 0 ? 0 : start; i < n; i++)
        if (marked[PyUnicode_READ(kind, data, i)]) {
            found = i;
            break;
        }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(found);
}

static PyMethodDef methods[] = {
    {"find", find, METH_VARARGS, "index of the first character at or after start marked in a table, or -1"},
    {"units", units, METH_VARARGS, "(unit hashes, unit counts) of normalized texts, as uint64/int64 bytes"},
    {"shingles", shingles, METH_VARARGS, "shingle hashes (uint64 bytes) of CSR unit hashes"},
    {"minhash", minhash, METH_VARARGS, "MinHash signatures (uint32 bytes) of CSR uint32 sets"},
    {"intersections", intersections, METH_VARARGS, "|A & B| (int64 bytes) of pairs of sorted CSR uint32 sets"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_shingle", NULL, -1, methods};

PyMODINIT_FUNC PyInit__shingle(void) { return PyModule_Create(&module); }
