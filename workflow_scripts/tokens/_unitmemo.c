/* The unit memo of fast_encode.py, in C: splitting texts into units, hashing, lookups and joining ids.
 *
 * A unit is a run of spaces (U+0020) and the non-spaces after it, or a run of spaces ending the text
 * (the regular expression " *[^ ]+| +"), read from the text's UTF-8. A unit is keyed by its bytes and
 * its kind: 1 for a document's first unit when ``first_apart`` (encoded with another model), else 0.
 * In byte-level mode (``byte_level``, byte_memo.py) a unit ends before a space followed by a character
 * surely not White_Space instead, texts come as UTF-8 back to back (``scan_utf8``), the missing units go
 * out the same way (``UnitBatch.missing``) and their ids come back flat (``UnitBatch.fill_flat``), where a
 * unit may be marked: a document holding it is to be encoded whole.
 *
 * A batch is three steps: ``UnitMemo.scan(texts)`` splits the texts, copies the ids of the units the memo
 * has and returns a ``UnitBatch`` whose ``firsts`` and ``laters`` are the distinct units it lacks (as str,
 * in order); SentencePiece encodes those (in Python) and ``UnitBatch.fill`` takes their ids;
 * ``UnitMemo.emit(batch)`` joins every text's ids (int32 bytes), returns the lengths (int64 bytes) and the
 * texts to be encoded whole, and keeps the batch's units in the memo. Several batches may be between
 * scan and emit (a unit missing from two of them is encoded twice). A text that holds a literal U+2581
 * (read by SentencePiece as a space) or that is not valid UTF-8 is to be encoded whole, and so is one
 * whose first unit of kind 1 has no ids while more units follow. The loops run without the GIL.
 *
 * The memo is two generations of at most ``max_entries / 2`` units each: when the young one is full it
 * becomes the old one (the previous old one is dropped); a unit found in the old one moves back. Units
 * over ``max_unit_chars`` characters are encoded for their batch only. Keys are compared in full, so a
 * hash collision costs time, never a wrong id. An entry is one cache line holding a short unit and its
 * ids; longer ones live in two arenas.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KEY_INLINE 24
#define IDS_INLINE 6
#define GROUP 32 /* units looked up together */
#define PENDING UINT32_MAX /* ids_len of a unit scanned but not filled yet */
#define WHOLE_ID INT32_MIN /* the one id of a unit whose documents are encoded whole (byte-level mode) */

typedef struct {
    uint64_t hash;
    uint32_t key_len; /* the kind byte and the unit's UTF-8 */
    uint32_t ids_len;
    union {
        char inline_key[KEY_INLINE];
        size_t off;
    } key;
    union {
        int32_t inline_ids[IDS_INLINE];
        size_t off;
    } ids;
} Entry;
_Static_assert(sizeof(Entry) == 64, "an entry is one cache line");

typedef struct {
    Entry *entries;
    size_t n, cap;
    uint64_t *slots; /* 0 empty, else hash >> 32 << 32 | entry index + 1; at most half used */
    size_t mask;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
} Table;

typedef struct {
    const char *s;
    size_t n;
} Text;

typedef struct {
    size_t out_pos;
    uint32_t entry;
} Hole;

enum { DOC_WHOLE = 1, DOC_FIRST_PENDING = 2, DOC_MANY_UNITS = 4 };

typedef struct {
    PyObject_HEAD
    Table table;          /* the units found in the old generation, and those missing (pending) */
    int32_t *out;         /* the ids of the units found, document after document */
    size_t out_len, out_cap;
    Hole *holes;          /* where the pending units' ids go */
    size_t n_holes, holes_cap;
    size_t *doc_out, *doc_hole; /* per document: where its ids and holes start (count + 1 items) */
    unsigned char *doc_flags;
    size_t docs;
    uint32_t *pending[2]; /* entries to fill, per kind, in the order of ``firsts`` and ``laters`` */
    size_t n_pending[2], pending_cap[2];
    int filled, emitted;
    PyObject *firsts, *laters, *missing;
} UnitBatch;

typedef struct {
    PyObject_HEAD
    Table young, old;
    size_t generation, max_unit_chars;
    int first_apart, byte_level, busy;
    unsigned long long units, encoded, whole;
} UnitMemo;

static PyTypeObject UnitBatchType;
static const char SPACE_PIECE[] = "\xe2\x96\x81"; /* U+2581 */

static uint64_t hash_unit(int kind, const char *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL * (n + 1) + (uint64_t)kind;
    uint64_t k;
    while (n >= 8) {
        memcpy(&k, p, 8);
        h = (h ^ k) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n) {
        k = 0;
        memcpy(&k, p, n);
        h = (h ^ k) * 0x94d049bb133111ebULL;
        h ^= h >> 29;
    }
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return h;
}

/* The capacity to grow ``cap`` to for ``need`` items (doubling from 1024). */
static size_t grown(size_t cap, size_t need) {
    cap = cap ? cap : 1024;
    while (cap < need)
        cap *= 2;
    return cap;
}

/* Makes room for ``need`` items in ``*buf`` (plain malloc: called without the GIL); -1 when out of memory. */
static int grow(void **buf, size_t *cap, size_t need, size_t item) {
    if (need <= *cap)
        return 0;
    size_t cap2 = grown(*cap, need);
    void *p = realloc(*buf, cap2 * item);
    if (!p)
        return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

/* ``grow`` for a table's entries, which stay aligned to cache lines. */
static int grow_entries(Table *t, size_t need) {
    if (need <= t->cap)
        return 0;
    size_t cap2 = grown(t->cap, need);
    Entry *p = aligned_alloc(64, cap2 * sizeof(Entry));
    if (!p)
        return -1;
    if (t->n)
        memcpy(p, t->entries, t->n * sizeof(Entry));
    free(t->entries);
    t->entries = p;
    t->cap = cap2;
    return 0;
}

static void table_free(Table *t) {
    free(t->entries);
    free(t->slots);
    free(t->keys);
    free(t->ids);
    memset(t, 0, sizeof(*t));
}

/* Empties ``t``, keeping its buffers. */
static void table_clear(Table *t) {
    t->n = t->keys_len = t->ids_len = 0;
    if (t->slots)
        memset(t->slots, 0, (t->mask + 1) * sizeof(uint64_t));
}

static inline const char *entry_key(const Table *t, const Entry *e) {
    return e->key_len <= KEY_INLINE ? e->key.inline_key : t->keys + e->key.off;
}

static inline const int32_t *entry_ids(const Table *t, const Entry *e) {
    return e->ids_len <= IDS_INLINE ? e->ids.inline_ids : t->ids + e->ids.off;
}

static inline int64_t table_find(const Table *t, uint64_t h, int kind, const char *p, size_t n) {
    if (!t->n)
        return -1;
    uint64_t tag = h >> 32;
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t slot = t->slots[i];
        if (!slot)
            return -1;
        if (slot >> 32 != tag)
            continue;
        size_t e = (uint32_t)slot - 1;
        const Entry *en = &t->entries[e];
        if (en->hash == h && en->key_len == n + 1) {
            const char *key = entry_key(t, en);
            if (key[0] == (char)kind && memcmp(key + 1, p, n) == 0)
                return (int64_t)e;
        }
    }
}

static int table_rehash(Table *t, size_t slots) {
    uint64_t *s = calloc(slots, sizeof(uint64_t));
    if (!s)
        return -1;
    size_t mask = slots - 1;
    for (size_t e = 0; e < t->n; e++) {
        size_t i = t->entries[e].hash & mask;
        while (s[i])
            i = (i + 1) & mask;
        s[i] = (t->entries[e].hash >> 32 << 32) | (e + 1);
    }
    free(t->slots);
    t->slots = s;
    t->mask = mask;
    return 0;
}

/* Sets the ids of entry ``e``; -1 when out of memory. */
static int table_set_ids(Table *t, size_t e, const int32_t *ids, size_t nids) {
    if (nids > IDS_INLINE) {
        if (grow((void **)&t->ids, &t->ids_cap, t->ids_len + nids, sizeof(int32_t)) < 0)
            return -1;
        memcpy(t->ids + t->ids_len, ids, nids * sizeof(int32_t));
        t->entries[e].ids.off = t->ids_len;
        t->ids_len += nids;
    } else if (nids) {
        memcpy(t->entries[e].ids.inline_ids, ids, nids * sizeof(int32_t));
    }
    t->entries[e].ids_len = (uint32_t)nids;
    return 0;
}

/* Adds a unit not in ``t``, with ``nids`` ids or pending ones (``ids`` NULL); its index, or -1 when out
 * of memory. */
static int64_t table_add(Table *t, uint64_t h, int kind, const char *p, size_t n, const int32_t *ids,
                         size_t nids) {
    if (t->n + 1 >= UINT32_MAX || n + 1 >= UINT32_MAX)
        return -1;
    if (!t->slots || 2 * (t->n + 1) > t->mask + 1) {
        if (table_rehash(t, t->slots ? 2 * (t->mask + 1) : 2048) < 0)
            return -1;
    }
    if (grow_entries(t, t->n + 1) < 0)
        return -1;
    size_t e = t->n;
    Entry *en = &t->entries[e];
    en->hash = h;
    en->key_len = (uint32_t)(n + 1);
    char *key = en->key.inline_key;
    if (n + 1 > KEY_INLINE) {
        if (grow((void **)&t->keys, &t->keys_cap, t->keys_len + n + 1, 1) < 0)
            return -1;
        en = &t->entries[e];
        en->key.off = t->keys_len;
        key = t->keys + t->keys_len;
        t->keys_len += n + 1;
    }
    key[0] = (char)kind;
    memcpy(key + 1, p, n);
    en->ids_len = PENDING;
    if (ids && table_set_ids(t, e, ids, nids) < 0)
        return -1;
    size_t i = h & t->mask;
    while (t->slots[i])
        i = (i + 1) & t->mask;
    t->slots[i] = (h >> 32 << 32) | (e + 1);
    t->n++;
    return (int64_t)e;
}

/* Whether a UTF-8 sequence starting with byte ``c`` is a character outside Unicode's White_Space for sure:
 * printable ASCII, or a lead byte no White_Space character starts with (those start with C2, E1, E2, E3). */
static inline int surely_not_space(unsigned char c) {
    return (c >= 0x21 && c <= 0x7e) || (c >= 0xc3 && c <= 0xdf) || (c >= 0xe4 && c <= 0xf4);
}

/* The end of the unit starting at ``i``: SentencePiece's are `` *[^ ]+| +``; byte-level ones end before a
 * space followed by a character surely not White_Space, where the known split patterns start a pretoken
 * whatever the text before it. */
static inline size_t unit_end(const char *s, size_t i, size_t n, int byte_level) {
    if (byte_level) {
        for (size_t k = i + 1; k < n; k++) {
            const char *space = memchr(s + k, ' ', n - k);
            if (!space)
                return n;
            k = (size_t)(space - s);
            if (k + 1 < n && surely_not_space((unsigned char)s[k + 1]))
                return k;
        }
        return n;
    }
    while (i < n && s[i] == ' ')
        i++;
    const char *space = memchr(s + i, ' ', n - i);
    return space ? (size_t)(space - s) : n;
}

static int push_hole(UnitBatch *b, uint32_t entry) {
    if (grow((void **)&b->holes, &b->holes_cap, b->n_holes + 1, sizeof(Hole)) < 0)
        return -1;
    b->holes[b->n_holes++] = (Hole){b->out_len, entry};
    return 0;
}

static int push_ids(UnitBatch *b, const int32_t *ids, size_t nids) {
    if (!nids)
        return 0;
    if (grow((void **)&b->out, &b->out_cap, b->out_len + nids, sizeof(int32_t)) < 0)
        return -1;
    memcpy(b->out + b->out_len, ids, nids * sizeof(int32_t));
    b->out_len += nids;
    return 0;
}

/* Looks up one unit of document ``d`` (``s[i:j]`` of ``n`` bytes) and copies its ids, or notes a hole;
 * 1 when the document is to be encoded whole, -1 when out of memory. */
static int scan_unit(UnitMemo *m, UnitBatch *b, size_t d, const char *s, size_t i, size_t j, size_t n,
                     uint64_t h) {
    int kind = i == 0 && m->first_apart;
    const char *p = s + i;
    size_t len = j - i;
    int64_t e = table_find(&m->young, h, kind, p, len);
    const Table *t = &m->young;
    if (e < 0) {
        t = &b->table;
        e = table_find(t, h, kind, p, len);
    }
    if (e < 0) {
        e = table_find(&m->old, h, kind, p, len);
        if (e >= 0) {
            const Entry *en = &m->old.entries[e];
            e = table_add(&b->table, h, kind, p, len, entry_ids(&m->old, en), en->ids_len);
            if (e < 0)
                return -1;
        }
    }
    if (e < 0) {
        e = table_add(&b->table, h, kind, p, len, NULL, 0);
        if (e < 0 ||
            grow((void **)&b->pending[kind], &b->pending_cap[kind], b->n_pending[kind] + 1, sizeof(uint32_t)) < 0)
            return -1;
        b->pending[kind][b->n_pending[kind]++] = (uint32_t)e;
    }
    const Entry *en = &t->entries[e];
    if (en->ids_len == PENDING) {
        if (kind)
            b->doc_flags[d] |= DOC_FIRST_PENDING;
        return push_hole(b, (uint32_t)e);
    }
    if (kind && en->ids_len == 0 && j < n)
        return 1; /* the model adds or strips the next unit's space, which that unit alone cannot tell */
    if (en->ids_len == 1 && entry_ids(t, en)[0] == WHOLE_ID)
        return 1;
    return push_ids(b, entry_ids(t, en), en->ids_len);
}

/* Splits one text into ``b`` (no GIL), ``GROUP`` units at a time: their hashes first, with the young
 * generation's slots and then entries fetched ahead, so that the lookups wait for memory together;
 * -1 when out of memory. */
static int scan_text(UnitMemo *m, UnitBatch *b, size_t d, const Text *text) {
    b->doc_out[d] = b->out_len;
    b->doc_hole[d] = b->n_holes;
    if (!text->s) {
        b->doc_flags[d] = DOC_WHOLE;
        return 0;
    }
    const char *s = text->s;
    size_t n = text->n;
    const Table *young = &m->young;
    size_t starts[GROUP + 1];
    uint64_t hashes[GROUP];
    for (size_t i = 0; i < n;) {
        size_t g = 0;
        for (; g < GROUP && i < n; g++) {
            size_t j = unit_end(s, i, n, m->byte_level);
            starts[g] = i;
            hashes[g] = hash_unit(i == 0 && m->first_apart, s + i, j - i);
            if (young->n)
                __builtin_prefetch(&young->slots[hashes[g] & young->mask]);
            i = j;
        }
        starts[g] = i;
        if (young->n) {
            for (size_t k = 0; k < g; k++) {
                uint64_t slot = young->slots[hashes[k] & young->mask];
                if (slot && slot >> 32 == hashes[k] >> 32)
                    __builtin_prefetch(&young->entries[(uint32_t)slot - 1]);
            }
        }
        for (size_t k = 0; k < g; k++) {
            int r = scan_unit(m, b, d, s, starts[k], starts[k + 1], n, hashes[k]);
            if (r) {
                if (r < 0)
                    return -1;
                b->out_len = b->doc_out[d];
                b->n_holes = b->doc_hole[d];
                b->doc_flags[d] = DOC_WHOLE;
                return 0;
            }
        }
        m->units += g;
        if (starts[0] == 0 && g > 1)
            b->doc_flags[d] |= DOC_MANY_UNITS;
    }
    return 0;
}

/* A batch for ``count`` texts; NULL with an exception set. */
static UnitBatch *new_batch(size_t count) {
    UnitBatch *b = PyObject_New(UnitBatch, &UnitBatchType);
    if (!b)
        return NULL;
    memset((char *)b + sizeof(PyObject), 0, sizeof(UnitBatch) - sizeof(PyObject));
    b->docs = count;
    b->doc_out = calloc(count + 1, sizeof(size_t));
    b->doc_hole = calloc(count + 1, sizeof(size_t));
    b->doc_flags = calloc(count + 1, 1);
    if (!b->doc_out || !b->doc_hole || !b->doc_flags) {
        Py_DECREF(b);
        return (UnitBatch *)PyErr_NoMemory();
    }
    return b;
}

/* Scans ``utf8`` (the batch's texts) into ``b`` without the GIL; -1 with an exception set. */
static int scan_all(UnitMemo *m, UnitBatch *b, const Text *utf8) {
    int failed = 0;
    m->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    for (size_t d = 0; d < b->docs && !failed; d++)
        failed = scan_text(m, b, d, &utf8[d]) < 0;
    Py_END_ALLOW_THREADS
    m->busy = 0;
    if (failed) {
        PyErr_NoMemory();
        return -1;
    }
    b->doc_out[b->docs] = b->out_len;
    b->doc_hole[b->docs] = b->n_holes;
    m->encoded += b->n_pending[0] + b->n_pending[1];
    return 0;
}

/* The missing units of ``kind`` as a list of str. */
static PyObject *unit_list(UnitBatch *b, int kind) {
    PyObject *list = PyList_New((Py_ssize_t)b->n_pending[kind]);
    for (size_t u = 0; list && u < b->n_pending[kind]; u++) {
        const Entry *en = &b->table.entries[b->pending[kind][u]];
        PyObject *unit = PyUnicode_DecodeUTF8(entry_key(&b->table, en) + 1, (Py_ssize_t)en->key_len - 1, "strict");
        if (!unit)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)u, unit);
    }
    return list;
}

/* The missing units (kind 0) as one bytes object and their sizes (int64 bytes). */
static PyObject *unit_blob(UnitBatch *b) {
    size_t total = 0, count = b->n_pending[0];
    for (size_t u = 0; u < count; u++)
        total += b->table.entries[b->pending[0][u]].key_len - 1;
    PyObject *blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    PyObject *sizes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * sizeof(int64_t)));
    if (!blob || !sizes) {
        Py_XDECREF(blob);
        Py_XDECREF(sizes);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(blob);
    int64_t *size = (int64_t *)PyBytes_AS_STRING(sizes);
    for (size_t u = 0; u < count; u++) {
        const Entry *en = &b->table.entries[b->pending[0][u]];
        memcpy(out, entry_key(&b->table, en) + 1, en->key_len - 1);
        out += en->key_len - 1;
        size[u] = en->key_len - 1;
    }
    return Py_BuildValue("(NN)", blob, sizes);
}

static int check_idle(UnitMemo *m) {
    if (m->busy)
        PyErr_SetString(PyExc_RuntimeError, "UnitMemo used by two threads at once");
    return m->busy ? -1 : 0;
}

static PyObject *memo_scan(UnitMemo *m, PyObject *texts) {
    if (check_idle(m) < 0)
        return NULL;
    if (m->byte_level) {
        PyErr_SetString(PyExc_TypeError, "a byte-level memo scans UTF-8: scan_utf8(blob, sizes)");
        return NULL;
    }
    PyObject *seq = PySequence_Tuple(texts); /* the texts' UTF-8 stays alive while the GIL is released */
    if (!seq)
        return NULL;
    size_t count = (size_t)PyTuple_GET_SIZE(seq);
    UnitBatch *b = new_batch(count);
    Text *utf8 = calloc(count + 1, sizeof(Text));
    if (!b || !utf8) {
        if (b && !utf8)
            PyErr_NoMemory();
        goto error;
    }
    for (size_t d = 0; d < count; d++) {
        PyObject *text = PyTuple_GET_ITEM(seq, d);
        if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "texts must be str");
            goto error;
        }
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(text, &n);
        if (!s)
            PyErr_Clear(); /* lone surrogates: SentencePiece says what it makes of them */
        else if (PyUnicode_IS_ASCII(text) || !memmem(s, (size_t)n, SPACE_PIECE, 3))
            utf8[d] = (Text){s, (size_t)n};
    }
    if (scan_all(m, b, utf8) < 0)
        goto error;
    free(utf8);
    Py_DECREF(seq);
    b->laters = unit_list(b, 0);
    b->firsts = b->laters ? unit_list(b, 1) : NULL;
    if (!b->firsts) {
        Py_DECREF(b);
        return NULL;
    }
    return (PyObject *)b;
error:
    free(utf8);
    Py_DECREF(seq);
    Py_XDECREF(b);
    return NULL;
}

/* scan_utf8(blob, sizes): texts given as their UTF-8 back to back (valid UTF-8, as str.encode gives). */
static PyObject *memo_scan_utf8(UnitMemo *m, PyObject *args) {
    Py_buffer blob, sizes;
    if (check_idle(m) < 0 || !PyArg_ParseTuple(args, "y*y*", &blob, &sizes))
        return NULL;
    UnitBatch *b = NULL;
    Text *utf8 = NULL;
    size_t count = (size_t)sizes.len / sizeof(int64_t), at = 0;
    if (!m->byte_level || sizes.len % sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "scan_utf8 needs a byte-level memo and int64 sizes");
        goto done;
    }
    b = new_batch(count);
    utf8 = calloc(count + 1, sizeof(Text));
    if (!b || !utf8) {
        if (b && !utf8)
            PyErr_NoMemory();
        goto error;
    }
    const int64_t *size = sizes.buf;
    for (size_t d = 0; d < count; d++) {
        if (size[d] < 0 || at + (size_t)size[d] > (size_t)blob.len) {
            PyErr_SetString(PyExc_ValueError, "the sizes exceed the blob");
            goto error;
        }
        utf8[d] = (Text){(const char *)blob.buf + at, (size_t)size[d]};
        at += (size_t)size[d];
    }
    if (scan_all(m, b, utf8) < 0)
        goto error;
    b->laters = PyList_New(0);
    b->firsts = PyList_New(0);
    b->missing = unit_blob(b);
    if (!b->laters || !b->firsts || !b->missing)
        goto error;
    goto done;
error:
    Py_CLEAR(b);
done:
    free(utf8);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&sizes);
    return (PyObject *)b;
}

/* Sets the ids of the pending units of ``kind`` from a sequence of sequences of ints. */
static int fill_kind(UnitBatch *b, int kind, PyObject *all_ids) {
    PyObject *seq = PySequence_Fast(all_ids, "ids must be a sequence of sequences of int");
    if (!seq)
        return -1;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != b->n_pending[kind]) {
        PyErr_Format(PyExc_ValueError, "%zd id lists for %zu units", PySequence_Fast_GET_SIZE(seq),
                     b->n_pending[kind]);
        Py_DECREF(seq);
        return -1;
    }
    int32_t *buf = NULL;
    size_t cap = 0;
    for (size_t u = 0; u < b->n_pending[kind]; u++) {
        PyObject *ids = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, u), "ids must be sequences of int");
        if (!ids)
            goto error;
        size_t nids = (size_t)PySequence_Fast_GET_SIZE(ids);
        if (grow((void **)&buf, &cap, nids, sizeof(int32_t)) < 0) {
            Py_DECREF(ids);
            PyErr_NoMemory();
            goto error;
        }
        for (size_t k = 0; k < nids; k++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(ids, (Py_ssize_t)k));
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(ids);
                goto error;
            }
            buf[k] = (int32_t)v;
        }
        Py_DECREF(ids);
        if (table_set_ids(&b->table, b->pending[kind][u], buf, nids) < 0) {
            PyErr_NoMemory();
            goto error;
        }
    }
    free(buf);
    Py_DECREF(seq);
    return 0;
error:
    free(buf);
    Py_DECREF(seq);
    return -1;
}

static PyObject *batch_fill(UnitBatch *b, PyObject *args) {
    PyObject *first_ids, *later_ids;
    if (!PyArg_ParseTuple(args, "OO", &first_ids, &later_ids))
        return NULL;
    if (b->filled) {
        PyErr_SetString(PyExc_RuntimeError, "batch already filled");
        return NULL;
    }
    if (fill_kind(b, 1, first_ids) < 0 || fill_kind(b, 0, later_ids) < 0)
        return NULL;
    b->filled = 1;
    Py_RETURN_NONE;
}

/* batch.fill_flat(ids, lengths, whole): the pending units' ids back to back (int32 bytes), each one's count
 * (int64 bytes) and whether its documents are to be encoded whole (one byte each): byte-level mode. */
static PyObject *batch_fill_flat(UnitBatch *b, PyObject *args) {
    Py_buffer ids, lengths, whole;
    if (!PyArg_ParseTuple(args, "y*y*y*", &ids, &lengths, &whole))
        return NULL;
    size_t count = b->n_pending[0], at = 0, total = (size_t)ids.len / sizeof(int32_t);
    const int64_t *length = lengths.buf;
    const char *flag = whole.buf;
    static const int32_t whole_id = WHOLE_ID;
    int ok = !b->filled && !b->n_pending[1] && (size_t)lengths.len == count * sizeof(int64_t) &&
             (size_t)whole.len == count && ids.len % sizeof(int32_t) == 0;
    for (size_t u = 0; ok && u < count; u++) {
        ok = length[u] >= 0 && at + (size_t)length[u] <= total;
        if (!ok)
            break;
        const int32_t *unit_ids = flag[u] ? &whole_id : (const int32_t *)ids.buf + at;
        if (table_set_ids(&b->table, b->pending[0][u], unit_ids, flag[u] ? 1 : (size_t)length[u]) < 0) {
            PyErr_NoMemory();
            break;
        }
        at += (size_t)length[u];
    }
    if (!ok && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "fill_flat takes an unfilled batch's ids, counts and flags");
    PyBuffer_Release(&ids);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&whole);
    if (PyErr_Occurred())
        return NULL;
    b->filled = 1;
    Py_RETURN_NONE;
}

/* Whether document ``d`` is to be encoded whole, once filled. */
static int doc_whole(const UnitBatch *b, size_t d) {
    unsigned char flags = b->doc_flags[d];
    if (flags & DOC_WHOLE)
        return 1;
    for (size_t h = b->doc_hole[d]; h < b->doc_hole[d + 1]; h++) {
        const Entry *en = &b->table.entries[b->holes[h].entry];
        if (en->ids_len == 1 && entry_ids(&b->table, en)[0] == WHOLE_ID)
            return 1;
    }
    if ((flags & DOC_FIRST_PENDING) && (flags & DOC_MANY_UNITS)) {
        const Hole *first = &b->holes[b->doc_hole[d]];
        return first->out_pos == b->doc_out[d] && b->table.entries[first->entry].ids_len == 0;
    }
    return 0;
}

/* Moves the batch's units into the memo (those of at most ``max_unit_chars`` characters; no GIL). */
static int keep_batch(UnitMemo *m, UnitBatch *b) {
    const Table *bt = &b->table;
    for (size_t e = 0; e < bt->n; e++) {
        const Entry *en = &bt->entries[e];
        const char *key = entry_key(bt, en);
        size_t chars = 0;
        for (size_t i = 1; i < en->key_len; i++)
            chars += ((unsigned char)key[i] & 0xc0) != 0x80;
        if (chars > m->max_unit_chars || table_find(&m->young, en->hash, key[0], key + 1, en->key_len - 1) >= 0)
            continue;
        if (m->young.n >= m->generation) {
            Table old = m->old;
            m->old = m->young;
            m->young = old;
            table_clear(&m->young);
        }
        if (table_add(&m->young, en->hash, key[0], key + 1, en->key_len - 1, entry_ids(bt, en), en->ids_len) < 0)
            return -1;
    }
    return 0;
}

static PyObject *memo_emit(UnitMemo *m, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &UnitBatchType)) {
        PyErr_SetString(PyExc_TypeError, "emit takes a UnitBatch from scan");
        return NULL;
    }
    UnitBatch *b = (UnitBatch *)arg;
    if (!b->filled || b->emitted || m->busy) {
        PyErr_SetString(PyExc_RuntimeError, "emit takes a filled batch once, from one thread");
        return NULL;
    }
    size_t total = 0, n_whole = 0;
    for (size_t d = 0; d < b->docs; d++) {
        if (doc_whole(b, d)) {
            n_whole++;
            continue;
        }
        total += b->doc_out[d + 1] - b->doc_out[d];
        for (size_t h = b->doc_hole[d]; h < b->doc_hole[d + 1]; h++)
            total += b->table.entries[b->holes[h].entry].ids_len;
    }
    PyObject *ids = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(total * sizeof(int32_t)));
    PyObject *lengths = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(b->docs * sizeof(int64_t)));
    PyObject *whole = PyList_New((Py_ssize_t)n_whole);
    if (!ids || !lengths || !whole)
        goto error;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(ids);
    int64_t *lens = (int64_t *)PyBytes_AS_STRING(lengths);
    size_t w = 0, k = 0;
    for (size_t d = 0; d < b->docs; d++) {
        if (doc_whole(b, d)) {
            PyObject *index = PyLong_FromSize_t(d);
            if (!index)
                goto error;
            PyList_SET_ITEM(whole, (Py_ssize_t)k++, index);
            lens[d] = 0;
            continue;
        }
        size_t start = w, pos = b->doc_out[d];
        for (size_t h = b->doc_hole[d]; h <= b->doc_hole[d + 1]; h++) {
            size_t upto = h < b->doc_hole[d + 1] ? b->holes[h].out_pos : b->doc_out[d + 1];
            if (upto > pos)
                memcpy(out + w, b->out + pos, (upto - pos) * sizeof(int32_t));
            w += upto - pos;
            pos = upto;
            if (h < b->doc_hole[d + 1]) {
                const Entry *en = &b->table.entries[b->holes[h].entry];
                if (en->ids_len)
                    memcpy(out + w, entry_ids(&b->table, en), en->ids_len * sizeof(int32_t));
                w += en->ids_len;
            }
        }
        lens[d] = (int64_t)(w - start);
    }
    m->busy = 1;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = keep_batch(m, b) < 0;
    Py_END_ALLOW_THREADS
    m->busy = 0;
    if (failed) {
        PyErr_NoMemory();
        goto error;
    }
    m->whole += n_whole;
    b->emitted = 1;
    return Py_BuildValue("(NNN)", ids, lengths, whole);
error:
    Py_XDECREF(ids);
    Py_XDECREF(lengths);
    Py_XDECREF(whole);
    return NULL;
}

static PyObject *memo_counters(UnitMemo *m, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("{sKsKsKsn}", "units", m->units, "units_encoded", m->encoded, "docs_encoded_whole",
                         m->whole, "memo_entries", (Py_ssize_t)(m->young.n + m->old.n));
}

static int memo_init(UnitMemo *m, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"max_entries", "max_unit_chars", "first_apart", "byte_level", NULL};
    Py_ssize_t max_entries, max_unit_chars;
    int first_apart, byte_level = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nnp|p", kwlist, &max_entries, &max_unit_chars, &first_apart,
                                     &byte_level))
        return -1;
    if (byte_level && first_apart) {
        PyErr_SetString(PyExc_ValueError, "a byte-level memo has no first units apart");
        return -1;
    }
    if (max_entries < 2 || max_unit_chars < 1) {
        PyErr_SetString(PyExc_ValueError, "max_entries must be >= 2 and max_unit_chars >= 1");
        return -1;
    }
    m->generation = (size_t)max_entries / 2;
    m->max_unit_chars = (size_t)max_unit_chars;
    m->first_apart = first_apart;
    m->byte_level = byte_level;
    return 0;
}

static void memo_dealloc(UnitMemo *m) {
    table_free(&m->young);
    table_free(&m->old);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static void batch_dealloc(UnitBatch *b) {
    table_free(&b->table);
    free(b->out);
    free(b->holes);
    free(b->doc_out);
    free(b->doc_hole);
    free(b->doc_flags);
    free(b->pending[0]);
    free(b->pending[1]);
    Py_XDECREF(b->firsts);
    Py_XDECREF(b->laters);
    Py_XDECREF(b->missing);
    PyObject_Free(b);
}

static PyObject *batch_firsts(UnitBatch *b, void *Py_UNUSED(closure)) {
    return Py_NewRef(b->firsts);
}

static PyObject *batch_laters(UnitBatch *b, void *Py_UNUSED(closure)) {
    return Py_NewRef(b->laters);
}

static PyObject *batch_missing(UnitBatch *b, void *Py_UNUSED(closure)) {
    return Py_NewRef(b->missing ? b->missing : Py_None);
}

static PyGetSetDef batch_getset[] = {
    {"missing", (getter)batch_missing, NULL,
     "Byte-level mode: (blob, sizes), the missing units' UTF-8 back to back and each one's size (int64).", NULL},
    {"firsts", (getter)batch_firsts, NULL, "The missing first units (kind 1), to encode with the model.", NULL},
    {"laters", (getter)batch_laters, NULL, "The other missing units, to encode with the units' model.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef batch_methods[] = {
    {"fill", (PyCFunction)batch_fill, METH_VARARGS,
     "fill(first_ids, later_ids): the ids of ``firsts`` and ``laters``, in their order."},
    {"fill_flat", (PyCFunction)batch_fill_flat, METH_VARARGS,
     "fill_flat(ids, lengths, whole): the ids of ``missing`` back to back (int32), each unit's count (int64) "
     "and whether the documents holding it are to be encoded whole (one byte each)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject UnitBatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "workflow_scripts.tokens._unitmemo.UnitBatch",
    .tp_doc = PyDoc_STR("A batch between UnitMemo.scan and UnitMemo.emit."),
    .tp_basicsize = sizeof(UnitBatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
};

static PyMethodDef memo_methods[] = {
    {"scan", (PyCFunction)memo_scan, METH_O,
     "scan(texts) -> UnitBatch: the texts split, the units found copied, those missing listed."},
    {"scan_utf8", (PyCFunction)memo_scan_utf8, METH_VARARGS,
     "scan_utf8(blob, sizes) -> UnitBatch: ``scan`` for a byte-level memo, of texts given as their UTF-8 "
     "back to back and each one's size (int64)."},
    {"emit", (PyCFunction)memo_emit, METH_O,
     "emit(batch) -> (ids, lengths, whole): int32 bytes of all ids, int64 bytes of the lengths and the "
     "indices of the texts to encode whole (length 0 here); the batch's units are kept."},
    {"counters", (PyCFunction)memo_counters, METH_NOARGS,
     "counters() -> units, units_encoded, docs_encoded_whole, memo_entries."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject UnitMemoType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "workflow_scripts.tokens._unitmemo.UnitMemo",
    .tp_doc = PyDoc_STR("UnitMemo(max_entries, max_unit_chars, first_apart, byte_level=False): a bounded memo "
                        "of unit ids."),
    .tp_basicsize = sizeof(UnitMemo),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)memo_init,
    .tp_dealloc = (destructor)memo_dealloc,
    .tp_methods = memo_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_unitmemo", "The unit memo of fast_encode.py in C.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__unitmemo(void) {
    if (PyType_Ready(&UnitMemoType) < 0 || PyType_Ready(&UnitBatchType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "UnitMemo", (PyObject *)&UnitMemoType) < 0 ||
        PyModule_AddObjectRef(m, "UnitBatch", (PyObject *)&UnitBatchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
