/* The tokenize reader's scanner (reader.py): JSON lines to texts, without the GIL.
 *
 * ``scan(block, start, line, key, markers, sft, limit, blob, long_bytes)`` reads the lines of ``block``
 * (whole lines) from offset ``start`` and takes each record it can vouch for: a line holding one JSON
 * object, valid in every part (strict UTF-8: the text's checked by CPython's decoder as it makes the str,
 * which leaves the line and those after it to the caller; no raw control character in a string, numbers
 * of at most 18 digits and no exponent, nesting at most 64 deep, no escape in a member's name), whose
 * ``key`` member (once) is a string of at most ``long_bytes`` bytes holding a character that is not
 * whitespace, and whose ``id`` member (once, if any) is a string, an integer, true, false or null; with
 * ``markers``, a text holding one must be an SFT record (``sft``) and one holding none must not be. Such a
 * record's text and id are what orjson gives, and so are its raw position's members (ingest's ``source``, a
 * string, and ``line``, an integer: at most once each; one of another type leaves the position unknown). A
 * blank line (ASCII whitespace only) is skipped. Any other
 * line stops the scan before it, for the caller to read with orjson (which says what is wrong, or reads what
 * this leaves alone); so does having taken ``limit`` bytes of text or more.
 *
 * Returns ``(offset, line, stopped, texts, ids, lines, sizes, blob, sources, raw_lines)``: where it stopped, the number of the
 * last line read, whether a line for the caller is there, the texts (str, each keeping its UTF-8: see
 * ``text_str``; with ``blob`` None: no str is made, and the text's UTF-8 is checked here, without the GIL)
 * and ids taken, their 1-based line numbers and UTF-8 sizes (int64 bytes), and with ``blob`` the texts'
 * UTF-8 back to back (else None); each record's raw file (``source``: a str, one object for a run of equal
 * ones, or None) and raw line (int64, -1 where either is unknown).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64
#define MAX_DIGITS 18

enum { ID_NONE, ID_STR, ID_INT, ID_TRUE, ID_FALSE };

typedef struct {
    size_t start, text_off, text_len, id_off, id_len; /* start: the line's offset in the block */
    size_t source_off, source_len;
    long long id_int;
    int64_t line, raw_line; /* raw_line: the record's ``line`` member (-1: none, or not an integer >= 0) */
    int id_kind, has_source; /* has_source: a string ``source`` member */
} Record;

typedef struct {
    const unsigned char *s, *end;
    unsigned char *out; /* where a kept string's bytes go (NULL: checked only) */
    size_t out_len;
    int nonspace; /* a kept string holds a character that is not whitespace (str.isspace) */
    int escaped;  /* the last string had an escape */
    int lazy;     /* the kept string's UTF-8 is left to PyUnicode_DecodeUTF8 to check (the text's) */
} Parser;

static int value(Parser *p, int depth);

static inline void ws(Parser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static inline int ascii_space(unsigned c) { /* str.isspace for ASCII */
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* str.isspace beyond ASCII (Python 3.11's Unicode 14; tests/tokens/test_reader.py compares): U+0085, U+00A0,
 * U+1680, U+2000 to U+200A, U+2028, U+2029, U+202F, U+205F and U+3000. */
static inline int wide_space(unsigned cp) {
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static inline unsigned point(const unsigned char *s, size_t n) { /* of a valid UTF-8 sequence */
    unsigned cp = s[0] & (0x7F >> n);
    for (size_t i = 1; i < n; i++) cp = cp << 6 | (s[i] & 0x3F);
    return cp;
}

static inline int hex4(const unsigned char *s, unsigned *v) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
        else return 0;
        r = r << 4 | d;
    }
    *v = r;
    return 1;
}

/* The UTF-8 of a code point at out (when not NULL); its length. */
static inline size_t put_point(unsigned char *out, unsigned cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) b[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) b[0] = 0xC0 | cp >> 6, b[1] = 0x80 | (cp & 0x3F), n = 2;
    else if (cp < 0x10000)
        b[0] = 0xE0 | cp >> 12, b[1] = 0x80 | (cp >> 6 & 0x3F), b[2] = 0x80 | (cp & 0x3F), n = 3;
    else
        b[0] = 0xF0 | cp >> 18, b[1] = 0x80 | (cp >> 12 & 0x3F), b[2] = 0x80 | (cp >> 6 & 0x3F),
        b[3] = 0x80 | (cp & 0x3F), n = 4;
    if (out) memcpy(out, b, n);
    return n;
}

/* The length of the strict UTF-8 sequence at s (0: invalid, or past end). */
static inline size_t utf8_seq(const unsigned char *s, const unsigned char *end) {
    unsigned c = s[0];
    size_t n = c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    if (!n || (size_t)(end - s) < n) return 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F; /* no surrogates */
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t below(uint64_t w, unsigned n) { return (w - ONES * n) & ~w & HIGHS; } /* a byte < n */
static inline uint64_t equal(uint64_t w, unsigned c) { return below(w ^ (ONES * c), 1); } /* a byte == c */

/* Whether s..end is strict UTF-8 (what CPython's decoder takes): ASCII 8 bytes at a time. */
static int utf8_valid(const unsigned char *s, const unsigned char *end) {
    while (s < end) {
        if (end - s >= 8) {
            uint64_t w;
            memcpy(&w, s, 8);
            if (!(w & HIGHS)) {
                s += 8;
                continue;
            }
        }
        if (*s < 0x80) {
            s++;
            continue;
        }
        size_t n = utf8_seq(s, end);
        if (!n) return 0;
        s += n;
    }
    return 1;
}

/* Whether the UTF-8 text at s holds a character that is not whitespace (-1: not valid UTF-8). */
static int utf8_nonspace(const unsigned char *s, const unsigned char *end) {
    while (s < end) {
        if (*s < 0x80) {
            if (!ascii_space(*s++)) return 1;
            continue;
        }
        size_t n = utf8_seq(s, end);
        if (!n) return -1;
        if (!wide_space(point(s, n))) return 1;
        s += n;
    }
    return 0;
}

/* The plain bytes at the start of s..end, 16 or 8 at a time (the rest is the caller's): no quote,
 * backslash or control character, and no byte past ASCII unless ``lazy``. They are copied to out (when not
 * NULL) as they are read, a whole word at a time (so out needs 16 bytes to spare). Sets *nonspace when one
 * is ASCII and not a space, and *wide when one is past ASCII. */
static inline size_t plain(const unsigned char *s, const unsigned char *end, unsigned char *out, int lazy,
                           int *nonspace, int *wide) {
    const unsigned char *start = s;
#if defined(__SSE2__) /* x86-64 has SSE2 */
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i control = _mm_set1_epi8(0x1F), space = _mm_set1_epi8(' ');
    const unsigned high_stops = lazy ? 0 : 0xFFFF;
    while (end - s >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)s);
        __m128i stops = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash));
        stops = _mm_or_si128(stops, _mm_cmpeq_epi8(_mm_min_epu8(v, control), v)); /* a byte <= 0x1F */
        unsigned high = (unsigned)_mm_movemask_epi8(v);
        unsigned stop = (unsigned)_mm_movemask_epi8(stops) | (high & high_stops);
        unsigned spaces = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, space));
        if (out) _mm_storeu_si128((__m128i *)(out + (s - start)), v);
        unsigned take = stop ? (unsigned)__builtin_ctz(stop) : 16, keep = stop ? (1u << take) - 1 : 0xFFFF;
        *nonspace |= (~(high | spaces) & keep) != 0;
        *wide |= (high & keep) != 0;
        s += take;
        if (stop) return (size_t)(s - start);
    }
#endif
    const uint64_t high_stops8 = lazy ? 0 : HIGHS;
    while (end - s >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        /* the lowest flag is exact (a borrow only runs above a byte that is flagged) */
        uint64_t stop = (w & high_stops8) | below(w, 0x20) | equal(w, '"') | equal(w, '\\');
        if (out) memcpy(out + (s - start), &w, 8);
        unsigned take = stop ? (unsigned)__builtin_ctzll(stop) / 8 : 8;
        uint64_t keep = take == 8 ? HIGHS : HIGHS & ((1ULL << (8 * take)) - 1);
        uint64_t t = w ^ (ONES * ' '), nonzero = ((t & ~HIGHS) + ~HIGHS) | t; /* exact, byte by byte */
        *nonspace |= (nonzero & ~w & keep) != 0;
        *wide |= (w & keep) != 0;
        s += take;
        if (stop) break;
    }
    return (size_t)(s - start);
}

/* A string at p->s (its quote): checked, and its text written where p->out points (which needs 16 bytes to
 * spare). 0: not one we vouch for. Runs of plain bytes go 16 or 8 at a time (``plain``): ASCII, and other
 * UTF-8 too where ``p->lazy`` leaves its check to the str's decoder (then a text of non-ASCII whitespace and
 * ASCII spaces only is checked here, character by character). */
static int string(Parser *p) {
    const unsigned char *s = p->s + 1, *end = p->end;
    unsigned char *out = p->out; /* NULL: checked only */
    size_t len = p->out_len, before = len;
    int nonspace = p->nonspace, wide = 0, lazy = p->lazy;
    p->escaped = 0;
    for (;;) {
        size_t n = plain(s, end, out ? out + len : NULL, lazy, &nonspace, &wide);
        s += n, len += n;
        if (s >= end) return 0;
        unsigned c = *s;
        if (c == '"') break;
        if (c < 0x20) return 0;
        if (c < 0x80 || lazy) { /* a plain byte the word loops left (near the end), or a backslash */
            if (c != '\\') {
                nonspace |= c != ' ', wide |= c >= 0x80;
                if (out) out[len] = (unsigned char)c;
                s++, len++;
                continue;
            }
        }
        if (c == '\\') {
            p->escaped = 1;
            if (end - s < 2) return 0;
            unsigned e = s[1], cp;
            s += 2;
            switch (e) {
            case '"': case '\\': case '/': cp = e; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (end - s < 4 || !hex4(s, &cp)) return 0;
                s += 4;
                if (cp >= 0xDC00 && cp < 0xE000) return 0;
                if (cp >= 0xD800 && cp < 0xDC00) { /* a high surrogate: its low one must follow */
                    unsigned low;
                    if (end - s < 6 || s[0] != '\\' || s[1] != 'u' || !hex4(s + 2, &low)) return 0;
                    if (low < 0xDC00 || low >= 0xE000) return 0;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    s += 6;
                }
                break;
            default:
                return 0;
            }
            if (cp < 0x80 ? !ascii_space(cp) : !wide_space(cp)) nonspace = 1;
            len += put_point(out ? out + len : NULL, cp);
            continue;
        }
        size_t seq = utf8_seq(s, end); /* strict: checked here */
        if (!seq) return 0;
        if (!nonspace && !wide_space(point(s, seq))) nonspace = 1;
        if (out) memcpy(out + len, s, seq);
        s += seq, len += seq;
    }
    p->s = s + 1, p->out_len = len, p->nonspace = nonspace;
    if (wide && !nonspace) { /* only spaces seen yet: the wide characters decide (p->out is set) */
        int found = utf8_nonspace(p->out + before, p->out + len);
        if (found < 0) return 0;
        p->nonspace = found;
    }
    return 1;
}

/* A number (JSON's grammar; at most MAX_DIGITS digits, no exponent); its value in *v when an integer. */
static int number(Parser *p, int *integer, long long *v) {
    const unsigned char *s = p->s, *end = p->end;
    int negative = s < end && *s == '-', digits = 0;
    long long r = 0;
    s += negative;
    if (s >= end || *s < '0' || *s > '9') return 0;
    if (*s == '0') s++, digits = 1;
    else
        while (s < end && *s >= '0' && *s <= '9') r = r * 10 + (*s++ - '0'), digits++;
    *integer = 1;
    if (s < end && *s == '.') {
        *integer = 0;
        s++;
        if (s >= end || *s < '0' || *s > '9') return 0;
        while (s < end && *s >= '0' && *s <= '9') s++, digits++;
    }
    if (digits > MAX_DIGITS || (s < end && (*s == 'e' || *s == 'E'))) return 0;
    *v = negative ? -r : r;
    p->s = s;
    return 1;
}

static int literal(Parser *p, const char *word, size_t n) {
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n)) return 0;
    p->s += n;
    return 1;
}

/* Any value, checked only (nothing written). */
static int value(Parser *p, int depth) {
    if (p->s >= p->end) return 0;
    unsigned char *out = p->out;
    int ok = 1, integer;
    long long v;
    p->out = NULL;
    switch (*p->s) {
    case '"': ok = string(p); break;
    case 't': ok = literal(p, "true", 4); break;
    case 'f': ok = literal(p, "false", 5); break;
    case 'n': ok = literal(p, "null", 4); break;
    case '[': case '{': {
        int object = *p->s == '{';
        unsigned char close = object ? '}' : ']';
        if (depth >= MAX_DEPTH) { ok = 0; break; }
        p->s++;
        ws(p);
        if (p->s < p->end && *p->s == close) { p->s++; break; }
        for (;;) {
            if (object) {
                if (p->s >= p->end || *p->s != '"' || !string(p)) { ok = 0; break; }
                ws(p);
                if (p->s >= p->end || *p->s != ':') { ok = 0; break; }
                p->s++;
                ws(p);
            }
            if (!value(p, depth + 1)) { ok = 0; break; }
            ws(p);
            if (p->s < p->end && *p->s == ',') { p->s++; ws(p); continue; }
            if (p->s < p->end && *p->s == close) { p->s++; break; }
            ok = 0;
            break;
        }
        break;
    }
    default: ok = number(p, &integer, &v);
    }
    p->out = out;
    return ok;
}

typedef struct {
    const char *key;
    Py_ssize_t key_len;
    Py_buffer *markers;
    Py_ssize_t n_markers;
    int sft;
    size_t long_bytes;
    int check_utf8; /* the text's UTF-8 is checked here (no str is made to check it) */
} Settings;

/* The record on one line (without its newline), or 0 for the caller's reader. */
static int record(const Settings *st, const unsigned char *s, const unsigned char *end, unsigned char *texts,
                  size_t *texts_len, unsigned char *ids, size_t *ids_len, unsigned char *sources,
                  size_t *sources_len, Record *r) {
    Parser p = {s, end, NULL, 0, 0, 0, 0};
    int has_text = 0, has_id = 0, seen_source = 0, seen_line = 0;
    ws(&p);
    if (p.s >= p.end || *p.s != '{') return 0;
    p.s++;
    ws(&p);
    r->id_kind = ID_NONE, r->has_source = 0, r->raw_line = -1;
    if (p.s < p.end && *p.s == '}') return 0; /* no text */
    for (;;) {
        if (p.s >= p.end || *p.s != '"') return 0;
        const unsigned char *name = p.s + 1;
        if (!string(&p)) return 0;
        size_t name_len = (size_t)(p.s - 1 - name);
        if (p.escaped) return 0; /* a name spelt with escapes: orjson's to read */
        ws(&p);
        if (p.s >= p.end || *p.s != ':') return 0;
        p.s++;
        ws(&p);
        int is_text = name_len == (size_t)st->key_len && !memcmp(name, st->key, name_len);
        int is_id = name_len == 2 && !memcmp(name, "id", 2);
        int is_source = name_len == 6 && !memcmp(name, "source", 6);
        int is_line = name_len == 4 && !memcmp(name, "line", 4);
        if (is_text && (is_id || is_source || is_line)) return 0; /* the text is another member: orjson's */
        if (is_text) {
            if (has_text++ || p.s >= p.end || *p.s != '"') return 0;
            p.out = texts + *texts_len, p.out_len = 0, p.nonspace = 0, p.lazy = 1;
            if (!string(&p) || !p.nonspace || p.out_len > st->long_bytes) return 0;
            if (st->check_utf8 && !utf8_valid(p.out, p.out + p.out_len)) return 0;
            p.lazy = 0;
            r->text_off = *texts_len, r->text_len = p.out_len;
            *texts_len += p.out_len;
            p.out = NULL;
        } else if (is_id) {
            if (has_id++ || p.s >= p.end) return 0;
            int integer;
            if (*p.s == '"') {
                p.out = ids + *ids_len, p.out_len = 0;
                if (!string(&p)) return 0;
                r->id_kind = ID_STR, r->id_off = *ids_len, r->id_len = p.out_len;
                *ids_len += p.out_len;
                p.out = NULL;
            } else if (*p.s == 't' || *p.s == 'f' || *p.s == 'n') {
                r->id_kind = *p.s == 't' ? ID_TRUE : *p.s == 'f' ? ID_FALSE : ID_NONE;
                if (!value(&p, 1)) return 0;
            } else if (*p.s == '-' || (*p.s >= '0' && *p.s <= '9')) {
                if (!number(&p, &integer, &r->id_int) || !integer) return 0;
                r->id_kind = ID_INT;
            } else {
                return 0;
            }
        } else if (is_source) {
            if (seen_source++ || p.s >= p.end) return 0;
            if (*p.s == '"') {
                p.out = sources + *sources_len, p.out_len = 0;
                if (!string(&p)) return 0;
                r->has_source = 1, r->source_off = *sources_len, r->source_len = p.out_len;
                *sources_len += p.out_len;
                p.out = NULL;
            } else if (!value(&p, 1)) {
                return 0;
            }
        } else if (is_line) {
            if (seen_line++ || p.s >= p.end) return 0;
            int integer;
            long long v;
            if (*p.s == '-' || (*p.s >= '0' && *p.s <= '9')) {
                if (!number(&p, &integer, &v)) return 0;
                if (integer && v >= 0) r->raw_line = v;
            } else if (!value(&p, 1)) {
                return 0;
            }
        } else if (!value(&p, 1)) {
            return 0;
        }
        ws(&p);
        if (p.s < p.end && *p.s == ',') { p.s++; ws(&p); continue; }
        if (p.s < p.end && *p.s == '}') { p.s++; break; }
        return 0;
    }
    ws(&p);
    if (p.s != p.end || !has_text) return 0;
    if (st->n_markers) {
        const unsigned char *text = texts + r->text_off;
        int marked = 0;
        for (Py_ssize_t m = 0; m < st->n_markers && !marked; m++)
            marked = memmem(text, r->text_len, st->markers[m].buf, (size_t)st->markers[m].len) != NULL;
        if (marked != st->sft) return 0;
    }
    return 1;
}

static int blank(const unsigned char *s, const unsigned char *end) { /* bytes.isspace(), or empty */
    for (; s < end; s++)
        if (!(*s == ' ' || (*s >= '\t' && *s <= '\r'))) return 0;
    return 1;
}

/* A str of valid UTF-8 that keeps its UTF-8, as PyUnicode_AsUTF8AndSize makes it keep it (the same
 * fields, allocator and terminating NUL; CPython 3.11 to 3.13, whose compact str has them): an engine
 * reading the str's UTF-8 (fastokens) then gets it without converting the str under the GIL. */
static PyObject *text_str(const char *s, Py_ssize_t n) {
    PyObject *text = PyUnicode_DecodeUTF8(s, n, NULL);
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
    if (!text || PyUnicode_IS_ASCII(text)) return text; /* an ASCII str's data is its UTF-8 */
    PyCompactUnicodeObject *u = (PyCompactUnicodeObject *)text;
    if (u->utf8) return text;
    char *copy = PyObject_Malloc((size_t)n + 1);
    if (!copy) return text;
    memcpy(copy, s, (size_t)n);
    copy[n] = 0;
    u->utf8 = copy, u->utf8_length = n;
#endif
    return text;
}

static PyObject *scan(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer block, key;
    Py_ssize_t start, limit, long_bytes;
    long long line;
    PyObject *marker_list;
    int sft, want_blob;
    if (!PyArg_ParseTuple(args, "y*nLy*O!pnpn", &block, &start, &line, &key, &PyList_Type, &marker_list,
                          &sft, &limit, &want_blob, &long_bytes))
        return NULL;
    if (start < 0 || start > block.len) {
        PyErr_Format(PyExc_ValueError, "start %zd is outside the block of %zd bytes", start, block.len);
        PyBuffer_Release(&block);
        PyBuffer_Release(&key);
        return NULL;
    }
    PyObject *result = NULL, *texts = NULL, *ids = NULL, *sources = NULL, **made = NULL;
    size_t n_made = 0;
    Py_ssize_t n_markers = PyList_GET_SIZE(marker_list), got_markers = 0;
    Py_buffer *markers = PyMem_Calloc((size_t)n_markers + 1, sizeof(Py_buffer));
    size_t in_len = (size_t)(block.len - start);
    unsigned char *text_buf = malloc(in_len + 16), *id_buf = malloc(in_len + 16); /* see string */
    unsigned char *source_buf = malloc(in_len + 16);
    size_t cap = 1024, n = 0, texts_len = 0, ids_len = 0, sources_len = 0;
    Record *records = malloc(cap * sizeof(Record));
    if (!markers || !text_buf || !id_buf || !source_buf || !records) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got_markers < n_markers; got_markers++)
        if (PyObject_GetBuffer(PyList_GET_ITEM(marker_list, got_markers), &markers[got_markers], PyBUF_SIMPLE))
            goto done;
    Settings st = {key.buf, key.len, markers, n_markers, sft, (size_t)long_bytes, want_blob};
    const unsigned char *data = block.buf, *end = data + block.len;
    size_t pos = (size_t)start;
    int stopped = 0, failed = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < (size_t)block.len && (Py_ssize_t)texts_len < limit) {
        const unsigned char *s = data + pos, *nl = memchr(s, '\n', (size_t)(end - s));
        const unsigned char *stop = nl ? nl : end;
        if (blank(s, stop)) {
            pos = (size_t)(stop - data) + (nl != NULL);
            line++;
            continue;
        }
        if (n == cap) {
            Record *grown = realloc(records, 2 * cap * sizeof(Record));
            if (!grown) { failed = 1; break; }
            records = grown, cap *= 2;
        }
        Record *r = &records[n];
        size_t before_texts = texts_len, before_ids = ids_len, before_sources = sources_len;
        if (!record(&st, s, stop, text_buf, &texts_len, id_buf, &ids_len, source_buf, &sources_len, r)) {
            texts_len = before_texts, ids_len = before_ids, sources_len = before_sources;
            stopped = 1;
            break;
        }
        r->start = pos;
        r->line = ++line;
        n++;
        pos = (size_t)(stop - data) + (nl != NULL);
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    /* the texts first (without ``blob``): one the decoder finds invalid UTF-8 in, and the records after it,
     * are the caller's */
    made = malloc((n ? n : 1) * sizeof(PyObject *));
    if (!made) {
        PyErr_NoMemory();
        goto done;
    }
    for (; !want_blob && n_made < n; n_made++) {
        Record *r = &records[n_made];
        made[n_made] = text_str((const char *)text_buf + r->text_off, (Py_ssize_t)r->text_len);
        if (made[n_made]) continue;
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
        PyErr_Clear();
        pos = r->start, line = r->line - 1, stopped = 1, texts_len = r->text_off;
        break;
    }
    if (!want_blob) n = n_made;
    texts = want_blob ? Py_NewRef(Py_None) : PyList_New((Py_ssize_t)n);
    ids = PyList_New((Py_ssize_t)n);
    sources = PyList_New((Py_ssize_t)n);
    PyObject *raw_lines = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
    PyObject *lines = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
    PyObject *sizes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
    PyObject *blob = want_blob ? PyBytes_FromStringAndSize((const char *)text_buf, (Py_ssize_t)texts_len)
                               : Py_NewRef(Py_None);
    if (!texts || !ids || !sources || !raw_lines || !lines || !sizes || !blob) {
        Py_XDECREF(raw_lines), Py_XDECREF(lines), Py_XDECREF(sizes), Py_XDECREF(blob);
        goto done;
    }
    int64_t *line_at = (int64_t *)PyBytes_AS_STRING(lines), *size_at = (int64_t *)PyBytes_AS_STRING(sizes);
    int64_t *raw_at = (int64_t *)PyBytes_AS_STRING(raw_lines);
    PyObject *last_source = NULL; /* borrowed: the list holds it */
    const Record *last_record = NULL;
    for (size_t i = 0; i < n; i++) {
        Record *r = &records[i];
        PyObject *id;
        switch (r->id_kind) {
        case ID_STR: id = PyUnicode_DecodeUTF8((const char *)id_buf + r->id_off, (Py_ssize_t)r->id_len, NULL); break;
        case ID_INT: id = PyLong_FromLongLong(r->id_int); break;
        case ID_TRUE: id = Py_NewRef(Py_True); break;
        case ID_FALSE: id = Py_NewRef(Py_False); break;
        default: id = Py_NewRef(Py_None);
        }
        PyObject *source = Py_None;
        int known = r->has_source && r->raw_line >= 0, reused = 0;
        if (known && last_record && last_record->source_len == r->source_len &&
            !memcmp(source_buf + last_record->source_off, source_buf + r->source_off, r->source_len))
            source = last_source, reused = 1;
        else if (known && id)
            source = PyUnicode_DecodeUTF8((const char *)source_buf + r->source_off, (Py_ssize_t)r->source_len, NULL);
        if (!id || !source) {
            Py_XDECREF(id);
            Py_DECREF(raw_lines), Py_DECREF(lines), Py_DECREF(sizes), Py_DECREF(blob);
            goto done;
        }
        if (reused || !known) Py_INCREF(source);
        if (known) last_source = source, last_record = r;
        PyList_SET_ITEM(sources, (Py_ssize_t)i, source);
        raw_at[i] = known ? r->raw_line : -1;
        if (!want_blob) {
            PyList_SET_ITEM(texts, (Py_ssize_t)i, made[i]);
            made[i] = NULL; /* the list's now */
        }
        PyList_SET_ITEM(ids, (Py_ssize_t)i, id);
        line_at[i] = r->line;
        size_at[i] = (int64_t)r->text_len;
    }
    result = Py_BuildValue("nLOOONNNON", (Py_ssize_t)pos, line, stopped ? Py_True : Py_False, texts, ids, lines,
                           sizes, blob, sources, raw_lines);
done:
    for (size_t i = 0; made && i < n_made; i++) Py_XDECREF(made[i]);
    free(made);
    Py_XDECREF(texts);
    Py_XDECREF(ids);
    Py_XDECREF(sources);
    for (Py_ssize_t m = 0; m < got_markers; m++) PyBuffer_Release(&markers[m]);
    PyMem_Free(markers);
    free(text_buf), free(id_buf), free(source_buf), free(records);
    PyBuffer_Release(&block);
    PyBuffer_Release(&key);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Scan JSON lines for the records to encode (see the module's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_jsonl", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__jsonl(void) { return PyModule_Create(&module); }
