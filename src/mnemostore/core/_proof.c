/* One walk that proves a JSON document and encodes it twice: sorted JSON and msgpack (keys sorted too).
 *
 * The optional native half of `jsonvalues.prove_json_document`. `prove(value)` returns (json, msgpack) for a
 * value made only of what every engine stores losslessly (exact dict with str keys, list, str without NUL and
 * without lone surrogates, int within 64 bits, finite float, bool, None; containers nested at most MAX_DEPTH
 * deep), and None for anything else: the Python proof then runs and names the problem, or clears the value.
 * The JSON is byte for byte what orjson writes with OPT_SORT_KEYS (floats are written by orjson itself), so
 * a state's hash does not depend on which half proved it; the msgpack is what ormsgpack packs of the value
 * with its keys sorted. The walk runs no Python code but orjson's float dump, so nothing mutates the value.
 * `pip install -e .` builds it again after a change here (tests/test_c_proof.py holds it to the Python proof).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_DEPTH 250 /* jsonvalues.MAX_DEPTH */
#define SMALL 16      /* dicts of at most this many keys sort on the stack */

typedef struct {
    PyObject *bytes; /* a bytes object written in place, resized as it grows and at the end */
    char *at;
    char *end;
} Out;

typedef struct {
    const char *text;
    Py_ssize_t size;
    PyObject *value;
} Item;

#define SHAPES 8
#define KEPT 30 /* a shape keeps its keys written out when each is plain text of at most this many bytes */
typedef struct {
    Py_ssize_t n;
    PyObject *keys[SMALL];      /* in the dict's order: the same objects (a state's dicts share interned keys) */
    Py_ssize_t order[SMALL];    /* the keys' indexes in sorted order */
    const char *text[SMALL];    /* each key's UTF-8, in the dict's order */
    Py_ssize_t size[SMALL];
    int kept;                   /* whether `json` and `pack` hold every key, in sorted order */
    int busy;                   /* dicts of this shape being written (enclosing the one now): not to be replaced */
    char json[SMALL][KEPT + 4]; /* `,"key":` (no comma first) */
    char pack[SMALL][KEPT + 1]; /* fixstr header, then the key */
    unsigned char json_size[SMALL];
    unsigned char pack_size[SMALL];
} Shape;
/* The key orders of the small dicts met in this walk: a dict whose keys are the very objects of one met
 * before, in the same order, is written without looking them up or sorting them again. Only within one
 * walk, during which every key stays alive (its dict holds it) and no Python code runs that could change
 * a dict (an object's address is then a fair identity). A shape in use by an enclosing dict is never
 * replaced: with every slot in use, a dict is sorted without one. */

typedef struct {
    Out json;
    Out pack;
    PyObject *dump_float; /* orjson.dumps */
    Shape shapes[SHAPES];
    int shapes_used;
    int shape_next;
} Walk;

enum { OK = 0, DEFER = 1, FAIL = -1 }; /* DEFER: not for this walk (the Python proof decides); FAIL: an exception is set */

static int out_open(Out *out, Py_ssize_t capacity) {
    out->bytes = PyBytes_FromStringAndSize(NULL, capacity);
    if (out->bytes == NULL) return FAIL;
    out->at = PyBytes_AS_STRING(out->bytes);
    out->end = out->at + capacity;
    return OK;
}

static int out_grow(Out *out, Py_ssize_t more) {
    char *start = PyBytes_AS_STRING(out->bytes);
    Py_ssize_t used = out->at - start;
    Py_ssize_t capacity = out->end - start;
    Py_ssize_t wanted = capacity * 2;
    if (wanted < used + more) wanted = used + more + 4096;
    if (_PyBytes_Resize(&out->bytes, wanted) < 0) return FAIL;
    start = PyBytes_AS_STRING(out->bytes);
    out->at = start + used;
    out->end = start + wanted;
    return OK;
}

#define RESERVE(out, n) \
    do { if ((out)->end - (out)->at < (Py_ssize_t)(n) && out_grow((out), (n)) < 0) return FAIL; } while (0)

static PyObject *out_close(Out *out) {
    Py_ssize_t used = out->at - PyBytes_AS_STRING(out->bytes);
    if (_PyBytes_Resize(&out->bytes, used) < 0) return NULL;
    PyObject *done = out->bytes;
    out->bytes = NULL;
    return done;
}

static inline void put_be(char *at, uint64_t value, int size) {
    for (int i = size - 1; i >= 0; i--) {
        at[i] = (char)(value & 0xff);
        value >>= 8;
    }
}

static inline int pack_header(Out *out, Py_ssize_t n, unsigned char fix, unsigned char fixmax, unsigned char b8,
                       unsigned char b16, unsigned char b32) {
    RESERVE(out, 5);
    unsigned char *at = (unsigned char *)out->at;
    if ((uint64_t)n <= fixmax) {
        at[0] = (unsigned char)(fix | n);
        out->at += 1;
    } else if (b8 && n <= 0xff) {
        at[0] = b8;
        at[1] = (unsigned char)n;
        out->at += 2;
    } else if (n <= 0xffff) {
        at[0] = b16;
        put_be(out->at + 1, (uint64_t)n, 2);
        out->at += 3;
    } else if ((uint64_t)n <= 0xffffffffu) {
        at[0] = b32;
        put_be(out->at + 1, (uint64_t)n, 4);
        out->at += 5;
    } else {
        return DEFER;
    }
    return OK;
}

static const char HEX[] = "0123456789abcdef";

#if defined(__SSE2__)
/* The bytes of a block that JSON escapes (a control character, quote or backslash) set to 0xff. */
static inline __m128i escapes16(__m128i x) {
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), below = _mm_set1_epi8(0x1f);
    return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, slash)),
                        _mm_cmpeq_epi8(_mm_min_epu8(x, below), x));
}
#endif

/* Whether JSON escapes this byte of UTF-8: a control character, a quote or a backslash. */
static inline int escaped(unsigned char c) { return c < 0x20 || c == '"' || c == '\\'; }

/* Whether JSON writes `text` as it is (a key, at most `KEPT` bytes: checked once a shape). */
static int plain(const char *text, Py_ssize_t size) {
    for (Py_ssize_t i = 0; i < size; i++) {
        if (escaped((unsigned char)text[i])) return 0;
    }
    return 1;
}

static inline int write_text(Walk *walk, const char *text, Py_ssize_t size) {
    /* msgpack: header, then the bytes as they are */
    int done = pack_header(&walk->pack, size, 0xa0, 31, 0xd9, 0xda, 0xdb);
    if (done != OK) return done;
    RESERVE(&walk->pack, size);
    memcpy(walk->pack.at, text, (size_t)size);
    walk->pack.at += size;
    /* JSON: quoted, escaped as orjson escapes; a NUL is the Python proof's to name. Plain bytes are copied
     * 16 at a time as they are checked (the buffer keeps 16 spare bytes for a block's whole store). */
    Out *json = &walk->json;
    RESERVE(json, size + 2 + 16);
    *json->at++ = '"';
    Py_ssize_t i = 0;
    for (;;) {
#if defined(__SSE2__)
        for (; i + 64 <= size; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(text + i)), b = _mm_loadu_si128((const __m128i *)(text + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(text + i + 32)), d = _mm_loadu_si128((const __m128i *)(text + i + 48));
            if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(escapes16(a), escapes16(b)),
                                               _mm_or_si128(escapes16(c), escapes16(d))))) break;
            _mm_storeu_si128((__m128i *)json->at, a);
            _mm_storeu_si128((__m128i *)(json->at + 16), b);
            _mm_storeu_si128((__m128i *)(json->at + 32), c);
            _mm_storeu_si128((__m128i *)(json->at + 48), d);
            json->at += 64;
        }
        for (; i + 16 <= size; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(text + i));
            _mm_storeu_si128((__m128i *)json->at, x);
            int mask = _mm_movemask_epi8(escapes16(x));
            if (mask) {
                int plain = __builtin_ctz((unsigned)mask);
                json->at += plain;
                i += plain;
                goto escape;
            }
            json->at += 16;
        }
#endif
        for (; i < size; i++) {
            unsigned char c = (unsigned char)text[i];
            if (escaped(c)) goto escape;
            *json->at++ = (char)c;
        }
        break;
    escape:;
        unsigned char c = (unsigned char)text[i++];
        if (c == 0) return DEFER;
        RESERVE(json, 6 + (size - i) + 1 + 16);
        char *at = json->at;
        at[0] = '\\';
        switch (c) {
            case '"': at[1] = '"'; json->at += 2; break;
            case '\\': at[1] = '\\'; json->at += 2; break;
            case '\b': at[1] = 'b'; json->at += 2; break;
            case '\t': at[1] = 't'; json->at += 2; break;
            case '\n': at[1] = 'n'; json->at += 2; break;
            case '\f': at[1] = 'f'; json->at += 2; break;
            case '\r': at[1] = 'r'; json->at += 2; break;
            default:
                at[1] = 'u'; at[2] = '0'; at[3] = '0'; at[4] = HEX[c >> 4]; at[5] = HEX[c & 15];
                json->at += 6;
        }
    }
    *json->at++ = '"';
    return OK;
}

static inline int text_of(PyObject *value, const char **text, Py_ssize_t *size) {
    *text = PyUnicode_AsUTF8AndSize(value, size);
    if (*text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return FAIL;
        PyErr_Clear(); /* a lone surrogate */
        return DEFER;
    }
    return OK;
}

static inline int write_int(Walk *walk, PyObject *value) {
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) return DEFER; /* past 64 bits */
    if (n == -1 && PyErr_Occurred()) return FAIL;
    Out *pack = &walk->pack;
    RESERVE(pack, 9);
    unsigned char *at = (unsigned char *)pack->at;
    if (n >= 0) {
        uint64_t u = (uint64_t)n;
        if (u <= 0x7f) { at[0] = (unsigned char)u; pack->at += 1; }
        else if (u <= 0xff) { at[0] = 0xcc; at[1] = (unsigned char)u; pack->at += 2; }
        else if (u <= 0xffff) { at[0] = 0xcd; put_be(pack->at + 1, u, 2); pack->at += 3; }
        else if (u <= 0xffffffffu) { at[0] = 0xce; put_be(pack->at + 1, u, 4); pack->at += 5; }
        else { at[0] = 0xcf; put_be(pack->at + 1, u, 8); pack->at += 9; }
    } else {
        if (n >= -32) { at[0] = (unsigned char)(int8_t)n; pack->at += 1; }
        else if (n >= INT8_MIN) { at[0] = 0xd0; at[1] = (unsigned char)(int8_t)n; pack->at += 2; }
        else if (n >= INT16_MIN) { at[0] = 0xd1; put_be(pack->at + 1, (uint64_t)n, 2); pack->at += 3; }
        else if (n >= INT32_MIN) { at[0] = 0xd2; put_be(pack->at + 1, (uint64_t)n, 4); pack->at += 5; }
        else { at[0] = 0xd3; put_be(pack->at + 1, (uint64_t)n, 8); pack->at += 9; }
    }
    Out *json = &walk->json;
    RESERVE(json, 21);
    char digits[21];
    int k = 0;
    uint64_t u = n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n;
    do { digits[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (n < 0) *json->at++ = '-';
    while (k) *json->at++ = digits[--k];
    return OK;
}

static int write_float(Walk *walk, PyObject *value) {
    double d = PyFloat_AS_DOUBLE(value);
    if (!isfinite(d)) return DEFER;
    Out *pack = &walk->pack;
    RESERVE(pack, 9);
    uint64_t bits;
    memcpy(&bits, &d, 8);
    *pack->at = (char)0xcb;
    put_be(pack->at + 1, bits, 8);
    pack->at += 9;
    PyObject *dumped = PyObject_CallOneArg(walk->dump_float, value);
    if (dumped == NULL) return FAIL;
    if (!PyBytes_CheckExact(dumped)) {
        Py_DECREF(dumped);
        PyErr_SetString(PyExc_TypeError, "dump_float must return bytes");
        return FAIL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(dumped);
    if (walk->json.end - walk->json.at < size && out_grow(&walk->json, size) < 0) {
        Py_DECREF(dumped);
        return FAIL;
    }
    memcpy(walk->json.at, PyBytes_AS_STRING(dumped), (size_t)size);
    walk->json.at += size;
    Py_DECREF(dumped);
    return OK;
}

static int write_value(Walk *walk, PyObject *value, int depth);

static int item_before(const Item *a, const Item *b) {
    Py_ssize_t size = a->size < b->size ? a->size : b->size;
    int order = memcmp(a->text, b->text, (size_t)size);
    return order < 0 || (order == 0 && a->size < b->size);
}

static int compare_items(const void *a, const void *b) {
    return item_before((const Item *)a, (const Item *)b) ? -1 : item_before((const Item *)b, (const Item *)a);
}

static Shape *shape_of(Walk *walk, PyObject **keys, Py_ssize_t n) {
    for (int i = 0; i < walk->shapes_used; i++) {
        Shape *shape = &walk->shapes[i];
        if (shape->n == n && memcmp(shape->keys, keys, (size_t)n * sizeof(PyObject *)) == 0) return shape;
    }
    return NULL;
}

/* A slot no enclosing dict is using, or NULL if all are. */
static Shape *free_shape(Walk *walk) {
    for (int tries = 0; tries < SHAPES; tries++) {
        Shape *shape = &walk->shapes[walk->shape_next];
        walk->shape_next = (walk->shape_next + 1) % SHAPES;
        if (shape->busy == 0) {
            if (walk->shapes_used < SHAPES) walk->shapes_used++;
            return shape;
        }
    }
    return NULL;
}

/* Fill `shape` with the order of `keys` (the dict's), and their written forms where each is short and plain. */
static int make_shape(Shape *shape, PyObject **keys, Py_ssize_t n) {
    shape->n = 0; /* matches nothing until complete */
    for (Py_ssize_t i = 0; i < n; i++) {
        int done = text_of(keys[i], &shape->text[i], &shape->size[i]);
        if (done != OK) return done;
        Py_ssize_t j = i;
        Item held = {shape->text[i], shape->size[i], NULL};
        while (j > 0) { /* insertion sort of the indexes */
            Py_ssize_t other = shape->order[j - 1];
            Item before = {shape->text[other], shape->size[other], NULL};
            if (!item_before(&held, &before)) break;
            shape->order[j] = other;
            j--;
        }
        shape->order[j] = i;
        shape->keys[i] = keys[i];
    }
    shape->kept = 1;
    for (Py_ssize_t i = 0; i < n && shape->kept; i++) {
        Py_ssize_t at = shape->order[i], size = shape->size[at];
        if (size > KEPT || !plain(shape->text[at], size)) {
            shape->kept = 0;
            break;
        }
        char *json = shape->json[i];
        Py_ssize_t used = 0;
        if (i) json[used++] = ',';
        json[used++] = '"';
        memcpy(json + used, shape->text[at], (size_t)size);
        used += size;
        json[used++] = '"';
        json[used++] = ':';
        shape->json_size[i] = (unsigned char)used;
        shape->pack[i][0] = (char)(0xa0 | size);
        memcpy(shape->pack[i] + 1, shape->text[at], (size_t)size);
        shape->pack_size[i] = (unsigned char)(size + 1);
    }
    shape->n = n;
    return OK;
}

static int open_dict(Walk *walk, Py_ssize_t n) {
    int done = pack_header(&walk->pack, n, 0x80, 15, 0, 0xde, 0xdf);
    if (done != OK) return done;
    RESERVE(&walk->json, 1);
    *walk->json.at++ = '{';
    return OK;
}

static int close_dict(Walk *walk) {
    RESERVE(&walk->json, 1);
    *walk->json.at++ = '}';
    return OK;
}

static int write_entry(Walk *walk, Py_ssize_t i, const char *text, Py_ssize_t size, PyObject *value, int depth) {
    if (i) {
        RESERVE(&walk->json, 1);
        *walk->json.at++ = ',';
    }
    int done = write_text(walk, text, size);
    if (done != OK) return done;
    RESERVE(&walk->json, 1);
    *walk->json.at++ = ':';
    return write_value(walk, value, depth + 1);
}

/* A dict's entries in its shape's order; the shape is kept from replacement meanwhile. */
static int write_shaped(Walk *walk, Shape *shape, PyObject **values, int depth) {
    int done = open_dict(walk, shape->n);
    shape->busy++;
    for (Py_ssize_t i = 0; i < shape->n && done == OK; i++) {
        Py_ssize_t at = shape->order[i];
        if (!shape->kept) {
            done = write_entry(walk, i, shape->text[at], shape->size[at], values[at], depth);
            continue;
        }
        if ((walk->json.end - walk->json.at < KEPT + 4 && out_grow(&walk->json, KEPT + 4) < 0)
            || (walk->pack.end - walk->pack.at < KEPT + 1 && out_grow(&walk->pack, KEPT + 1) < 0)) {
            done = FAIL;
            break;
        }
        memcpy(walk->json.at, shape->json[i], KEPT + 4); /* the whole slot: fixed size, one move */
        walk->json.at += shape->json_size[i];
        memcpy(walk->pack.at, shape->pack[i], KEPT + 1);
        walk->pack.at += shape->pack_size[i];
        done = write_value(walk, values[at], depth + 1);
    }
    shape->busy--;
    return done != OK ? done : close_dict(walk);
}

/* A dict's entries sorted here, without a shape (a large dict, or every shape in use). */
static int write_sorted(Walk *walk, PyObject *dict, Py_ssize_t n, int depth) {
    Item small[SMALL];
    Item *items = n <= SMALL ? small : PyMem_Malloc((size_t)n * sizeof(Item));
    if (items == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    int done = OK;
    Py_ssize_t pos = 0, k = 0;
    PyObject *key, *item;
    while (PyDict_Next(dict, &pos, &key, &item)) {
        if (!PyUnicode_CheckExact(key)) { done = DEFER; goto out; }
        if ((done = text_of(key, &items[k].text, &items[k].size)) != OK) goto out;
        items[k++].value = item;
    }
    qsort(items, (size_t)n, sizeof(Item), compare_items);
    if ((done = open_dict(walk, n)) != OK) goto out;
    for (Py_ssize_t i = 0; i < n && done == OK; i++) {
        done = write_entry(walk, i, items[i].text, items[i].size, items[i].value, depth);
    }
    if (done == OK) done = close_dict(walk);
out:
    if (items != small) PyMem_Free(items);
    return done;
}

static int write_dict(Walk *walk, PyObject *dict, int depth) {
    Py_ssize_t n = PyDict_GET_SIZE(dict);
    if (n > SMALL) return write_sorted(walk, dict, n, depth);
    PyObject *keys[SMALL], *values[SMALL];
    Py_ssize_t pos = 0, k = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return DEFER;
        keys[k] = key;
        values[k++] = value;
    }
    Shape *shape = shape_of(walk, keys, n);
    if (shape == NULL) {
        if ((shape = free_shape(walk)) == NULL) return write_sorted(walk, dict, n, depth);
        int done = make_shape(shape, keys, n);
        if (done != OK) return done;
    }
    return write_shaped(walk, shape, values, depth);
}

static int write_list(Walk *walk, PyObject *list, int depth) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    int done = pack_header(&walk->pack, n, 0x90, 15, 0, 0xdc, 0xdd);
    if (done != OK) return done;
    RESERVE(&walk->json, 1);
    *walk->json.at++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) {
            RESERVE(&walk->json, 1);
            *walk->json.at++ = ',';
        }
        if ((done = write_value(walk, PyList_GET_ITEM(list, i), depth + 1)) != OK) return done;
    }
    RESERVE(&walk->json, 1);
    *walk->json.at++ = ']';
    return OK;
}

static inline int write_word(Walk *walk, const char *word, size_t size, unsigned char packed) {
    RESERVE(&walk->json, size);
    memcpy(walk->json.at, word, size);
    walk->json.at += size;
    RESERVE(&walk->pack, 1);
    *walk->pack.at++ = (char)packed;
    return OK;
}

static int write_value(Walk *walk, PyObject *value, int depth) {
    PyTypeObject *type = Py_TYPE(value);
    if (type == &PyUnicode_Type) {
        const char *text;
        Py_ssize_t size;
        int done = text_of(value, &text, &size);
        return done != OK ? done : write_text(walk, text, size);
    }
    if (type == &PyDict_Type) {
        if (depth >= MAX_DEPTH) return DEFER;
        return write_dict(walk, value, depth);
    }
    if (type == &PyList_Type) {
        if (depth >= MAX_DEPTH) return DEFER;
        return write_list(walk, value, depth);
    }
    if (type == &PyLong_Type) return write_int(walk, value);
    if (value == Py_None) return write_word(walk, "null", 4, 0xc0);
    if (value == Py_True) return write_word(walk, "true", 4, 0xc3);
    if (value == Py_False) return write_word(walk, "false", 5, 0xc2);
    if (type == &PyFloat_Type) return write_float(walk, value);
    return DEFER;
}

static Py_ssize_t size_hint = 4096;
/* What the next buffers start at: the last JSON's size, or if smaller, an eighth nearer it than the hint was,
 * so a small value proved between two large states (an `apply`'s update) does not make the next state's
 * buffers grow from small again, and one huge state is forgotten over a few dozen calls. */

static PyObject *prove(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "prove(value, dump_float) takes two arguments");
        return NULL;
    }
    Walk walk;
    walk.json.bytes = walk.pack.bytes = NULL;
    walk.dump_float = args[1];
    walk.shapes_used = walk.shape_next = 0;
    for (int i = 0; i < SHAPES; i++) walk.shapes[i].busy = 0;
    Py_ssize_t capacity = size_hint + size_hint / 4 + 64;
    PyObject *result = NULL;
    if (out_open(&walk.json, capacity) < 0 || out_open(&walk.pack, capacity) < 0) goto out;
    int done = write_value(&walk, args[0], 0);
    if (done == FAIL) goto out;
    if (done == DEFER) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    Py_ssize_t used = walk.json.at - PyBytes_AS_STRING(walk.json.bytes);
    size_hint = used >= size_hint ? used : size_hint - size_hint / 8 + used / 8;
    PyObject *json = out_close(&walk.json);
    if (json == NULL) goto out;
    PyObject *pack = out_close(&walk.pack);
    if (pack == NULL) {
        Py_DECREF(json);
        goto out;
    }
    result = PyTuple_Pack(2, json, pack);
    Py_DECREF(json);
    Py_DECREF(pack);
out:
    Py_XDECREF(walk.json.bytes);
    Py_XDECREF(walk.pack.bytes);
    return result;
}

static PyMethodDef methods[] = {
    {"prove", (PyCFunction)(void (*)(void))prove, METH_FASTCALL,
     "prove(value, dump_float) -> (sorted JSON, msgpack with sorted keys), or None if the value is not for this walk."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mnemostore.core._proof",
    "One C walk proving a JSON document and encoding it as sorted JSON and msgpack (jsonvalues' native half).",
    0, methods,
};

PyMODINIT_FUNC PyInit__proof(void) { return PyModule_Create(&module); }
