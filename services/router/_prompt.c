/* A prompt's block hashes in one call: services/router/policy.py's `prompt_parts`, `prompt_hashes` and `home_of`, for
 * the router's hot path. policy.py holds the same computation in Python and uses it where this module is not built;
 * tests/services/test_router_prompt_native.py holds the two to the same results for any body.
 *
 * Why native: every routed request with a routing record (the default) or a choice among members hashes its prompt,
 * and in CPython 3.11 each small step of that walk costs 100 to 300 instructions. A trivial request's hashing was
 * 9,000 instructions of the router's 253,000, a 2,000-character system prompt's 21,000 (docs/router.md).
 *
 * The text is the prompt's parts joined by "\n", as UTF-8; a block is `block_chars` of its bytes; each block's hash
 * is the CRC-32 (zlib's) of the whole text up to the block's end; at most `max_blocks` blocks. A prompt's lead (its
 * first two parts: a chat's first role and message, a system prompt) is kept with the CRC at its end, as policy.py
 * keeps its leads' hashes: most requests to a model start alike. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* --- CRC-32 (the polynomial zlib uses, reflected), eight bytes a step ------------------------------------------ */

static uint32_t T[8][256];

static void crc_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        T[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) T[t][i] = (T[t - 1][i] >> 8) ^ T[0][T[t - 1][i] & 0xff];
}

/* the running CRC `c` (inverted, as zlib keeps it while it runs) over `n` more bytes */
static uint32_t crc_run(uint32_t c, const unsigned char *p, Py_ssize_t n) {
#if !PY_BIG_ENDIAN /* the eight-byte step reads its words little-endian; a big-endian machine takes bytes alone */
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
        a ^= c;
        c = T[7][a & 0xff] ^ T[6][(a >> 8) & 0xff] ^ T[5][(a >> 16) & 0xff] ^ T[4][a >> 24] ^ T[3][b & 0xff] ^
            T[2][(b >> 8) & 0xff] ^ T[1][(b >> 16) & 0xff] ^ T[0][b >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--) c = (c >> 8) ^ T[0][(c ^ *p++) & 0xff];
    return c;
}

/* --- the prompt's parts --------------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *data; /* UTF-8 (a compact ASCII str's own bytes) */
    Py_ssize_t bytes, chars;
    int ascii;
} Part;

typedef struct {
    Part *parts;
    Py_ssize_t count, capacity;
    Part inline_parts[16];
    Py_ssize_t bytes, chars;   /* of the text so far, "\n"s included */
    Py_ssize_t enough_bytes;   /* max_blocks * block_chars: no block past it is hashed */
    Py_ssize_t enough_chars;   /* block_chars: the home's characters */
} Parts;

enum { WALKED = 0, FAILED = -1, UNSUPPORTED = 1 }; /* UNSUPPORTED: leave the body to policy.py's walk */

static int enough(const Parts *ps) { return ps->bytes >= ps->enough_bytes && ps->chars >= ps->enough_chars; }

static int add(Parts *ps, PyObject *s) {
    if (enough(ps)) return WALKED; /* nothing past this changes a block or the home */
    Part part;
    if (PyUnicode_IS_ASCII(s)) {
        part.data = (const unsigned char *)PyUnicode_DATA(s);
        part.bytes = PyUnicode_GET_LENGTH(s);
        part.ascii = 1;
    } else {
        part.data = (const unsigned char *)PyUnicode_AsUTF8AndSize(s, &part.bytes);
        if (part.data == NULL) { /* a lone surrogate: policy.py encodes it with surrogatepass */
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return FAILED;
            PyErr_Clear();
            return UNSUPPORTED;
        }
        part.ascii = 0;
    }
    part.chars = PyUnicode_GET_LENGTH(s);
    if (ps->count == ps->capacity) {
        Py_ssize_t capacity = ps->capacity * 2;
        Part *grown = PyMem_Malloc(sizeof(Part) * capacity);
        if (grown == NULL) {
            PyErr_NoMemory();
            return FAILED;
        }
        memcpy(grown, ps->parts, sizeof(Part) * ps->count);
        if (ps->parts != ps->inline_parts) PyMem_Free(ps->parts);
        ps->parts = grown;
        ps->capacity = capacity;
    }
    Py_ssize_t separator = ps->count ? 1 : 0;
    ps->parts[ps->count++] = part;
    ps->bytes += part.bytes + separator;
    ps->chars += part.chars + separator;
    return WALKED;
}

static PyObject *K_messages, *K_role, *K_content, *K_text, *K_system, *K_instructions, *K_prompt, *K_input, *EMPTY;

static int content_text(Parts *ps, PyObject *content);

/* a message's content parts: {"text": ...} (or {"content": ...}) and plain strings */
static int content_list(Parts *ps, PyObject *list) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        int r = WALKED;
        if (PyDict_Check(item)) {
            PyObject *inner = PyDict_GetItemWithError(item, K_text);
            if (inner == NULL) {
                if (PyErr_Occurred()) return FAILED;
                inner = PyDict_GetItemWithError(item, K_content);
                if (inner == NULL && PyErr_Occurred()) return FAILED;
            }
            if (inner != NULL) {
                if (Py_EnterRecursiveCall(" in a prompt's content")) return FAILED;
                r = content_text(ps, inner);
                Py_LeaveRecursiveCall();
            }
        } else if (PyUnicode_Check(item)) {
            r = add(ps, item);
        }
        if (r != WALKED) return r;
    }
    return WALKED;
}

static int content_text(Parts *ps, PyObject *content) {
    if (PyUnicode_Check(content)) return add(ps, content);
    if (PyList_Check(content)) return content_list(ps, content);
    return WALKED;
}

static int messages(Parts *ps, PyObject *list) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list) && !enough(ps); i++) {
        PyObject *message = PyList_GET_ITEM(list, i);
        if (!PyDict_Check(message)) continue;
        PyObject *role = PyDict_GetItemWithError(message, K_role);
        if (role == NULL && PyErr_Occurred()) return FAILED;
        int r = add(ps, role != NULL && PyUnicode_Check(role) ? role : EMPTY);
        if (r != WALKED) return r;
        PyObject *content = PyDict_GetItemWithError(message, K_content);
        if (content == NULL) {
            if (PyErr_Occurred()) return FAILED;
            continue;
        }
        if ((r = content_text(ps, content)) != WALKED) return r;
    }
    return WALKED;
}

/* policy.prompt_parts: system first, as an engine sees it. The body is decoded JSON (str keys, no subclasses), so no
 * lookup here runs Python code, and the items this walk borrows from its lists stay alive until it returns. */
static int walk(Parts *ps, PyObject *body) {
    PyObject *keys[] = {K_system, K_instructions, K_messages, K_prompt, K_input};
    for (int k = 0; k < 5; k++) {
        PyObject *value = PyDict_GetItemWithError(body, keys[k]);
        if (value == NULL) {
            if (PyErr_Occurred()) return FAILED;
            continue;
        }
        int r = WALKED;
        if (keys[k] == K_messages) {
            if (PyList_Check(value)) r = messages(ps, value);
        } else if (keys[k] == K_prompt) {
            if (PyUnicode_Check(value)) r = add(ps, value);
            else if (PyList_Check(value) && PyList_GET_SIZE(value) && PyUnicode_Check(PyList_GET_ITEM(value, 0)))
                r = add(ps, PyList_GET_ITEM(value, 0));
        } else {
            r = content_text(ps, value);
        }
        if (r != WALKED) return r;
    }
    return WALKED;
}

/* --- hashing, with the leads kept ----------------------------------------------------------------------------- */

typedef struct {
    uint32_t state;     /* the running CRC at the end of what was fed */
    Py_ssize_t fill;    /* bytes of the block being filled */
    Py_ssize_t block, max;
    uint32_t *hashes;
    Py_ssize_t count;
} Crc;

static void feed(Crc *c, const unsigned char *p, Py_ssize_t n) {
    while (n > 0 && c->count < c->max) {
        Py_ssize_t take = c->block - c->fill;
        if (take > n) take = n;
        c->state = crc_run(c->state, p, take);
        c->fill += take;
        p += take;
        n -= take;
        if (c->fill == c->block) {
            c->hashes[c->count++] = ~c->state;
            c->fill = 0;
        }
    }
}

/* policy.home_of: the CRC-32 of the text's first block_chars characters (0 when it has fewer) */
static int home_of(const Part *parts, Py_ssize_t count, Py_ssize_t chars, Py_ssize_t block, uint32_t *home) {
    if (chars < block) return 0;
    uint32_t c = 0xFFFFFFFFu;
    Py_ssize_t left = block;
    for (Py_ssize_t i = 0; i < count && left; i++) {
        const Part *part = &parts[i];
        if (i) {
            c = crc_run(c, (const unsigned char *)"\n", 1);
            if (!--left) break;
        }
        if (part->ascii) {
            Py_ssize_t take = part->bytes < left ? part->bytes : left;
            c = crc_run(c, part->data, take);
            left -= take;
        } else {
            Py_ssize_t n = 0;
            while (n < part->bytes && left) {
                n++;
                while (n < part->bytes && (part->data[n] & 0xC0) == 0x80) n++; /* the character's other bytes */
                left--;
            }
            c = crc_run(c, part->data, n);
        }
    }
    *home = ~c;
    return 1;
}

#define LEADS 256 /* as policy.LEADS: direct-mapped by the lead's length and last bytes, a newer lead replaces */

typedef struct {
    unsigned char *text; /* the lead: its first part, "\n", its second (cut at max_blocks * block_chars bytes) */
    Py_ssize_t bytes, block, max;
    Crc crc;             /* the CRC and blocks at the lead's end (crc.hashes: its own copy) */
    int homed;           /* the lead holds the home's characters: `home` is the prompt's */
    uint32_t home;
    PyObject *hashes[2]; /* made once, for a prompt with no block past its lead: [0] the tuple, [1] the Raw */
    uint64_t generation; /* counts replacements: an object made for a lead is kept only if the lead is still there */
} Lead;

static Lead leads[LEADS];

static size_t lead_slot(const unsigned char *end, Py_ssize_t tail, Py_ssize_t bytes) {
    size_t h = (size_t)bytes * 0x9E3779B97F4A7C15ull;
    if (tail > 16) tail = 16;
    for (Py_ssize_t i = 1; i <= tail; i++) h = (h ^ end[-i]) * 0x100000001B3ull;
    return (size_t)(h >> 32) % LEADS;
}

/* Feed the lead (its first two parts, "\n" between, cut where no block can follow: max_blocks * block_chars bytes)
 * into `c`, from a kept lead when one matches; keep it when none did. The kept lead, or NULL when it could not be kept. */
static Lead *feed_lead(Crc *c, const Part *first, const Part *second) {
    Py_ssize_t limit = c->max * c->block, whole = first->bytes + 1 + second->bytes;
    Py_ssize_t bytes = whole < limit ? whole : limit;
    Py_ssize_t in_first = bytes < first->bytes ? bytes : first->bytes; /* of `first`, in the lead */
    Py_ssize_t in_second = bytes > first->bytes + 1 ? bytes - first->bytes - 1 : 0;
    const unsigned char *end = in_second ? second->data + in_second : first->data + in_first;
    Lead *lead = &leads[lead_slot(end, in_second ? in_second : in_first, bytes)];
    if (lead->text != NULL && lead->bytes == bytes && lead->block == c->block && lead->max == c->max &&
        memcmp(lead->text, first->data, in_first) == 0 && (bytes <= first->bytes || lead->text[first->bytes] == '\n') &&
        memcmp(lead->text + first->bytes + 1, second->data, in_second) == 0) {
        memcpy(c->hashes, lead->crc.hashes, sizeof(uint32_t) * lead->crc.count);
        c->count = lead->crc.count;
        c->state = lead->crc.state;
        c->fill = lead->crc.fill;
        return lead;
    }
    feed(c, first->data, in_first);
    if (bytes > first->bytes) feed(c, (const unsigned char *)"\n", 1);
    feed(c, second->data, in_second);
    unsigned char *text = PyMem_Malloc(bytes);
    uint32_t *hashes = PyMem_Malloc(sizeof(uint32_t) * (c->count ? c->count : 1));
    if (text == NULL || hashes == NULL) { /* not kept: the result stands */
        PyMem_Free(text);
        PyMem_Free(hashes);
        return NULL;
    }
    PyMem_Free(lead->text);
    PyMem_Free(lead->crc.hashes);
    PyObject *made[2] = {lead->hashes[0], lead->hashes[1]}; /* released once the slot is whole again */
    lead->hashes[0] = lead->hashes[1] = NULL;
    lead->generation++;
    memcpy(text, first->data, in_first);
    if (bytes > first->bytes) text[first->bytes] = '\n';
    memcpy(text + first->bytes + 1, second->data, in_second);
    memcpy(hashes, c->hashes, sizeof(uint32_t) * c->count);
    lead->text = text;
    lead->bytes = bytes;
    lead->block = c->block;
    lead->max = c->max;
    lead->crc = *c;
    lead->crc.hashes = hashes;
    /* the home from the lead alone when the lead is whole (not cut) and holds a block's characters */
    Part two[2] = {*first, *second};
    lead->homed = bytes == whole && home_of(two, 2, first->chars + 1 + second->chars, c->block, &lead->home);
    Py_XDECREF(made[0]);
    Py_XDECREF(made[1]);
    return lead;
}

/* --- the call ------------------------------------------------------------------------------------------------- */

static void put_uint(unsigned char **out, uint32_t v) { /* as MessagePack's smallest form, as msgspec writes it */
    unsigned char *p = *out;
    if (v < 0x80) {
        *p++ = (unsigned char)v;
    } else if (v <= 0xff) {
        *p++ = 0xcc;
        *p++ = (unsigned char)v;
    } else if (v <= 0xffff) {
        *p++ = 0xcd;
        *p++ = (unsigned char)(v >> 8);
        *p++ = (unsigned char)v;
    } else {
        *p++ = 0xce;
        *p++ = (unsigned char)(v >> 24);
        *p++ = (unsigned char)(v >> 16);
        *p++ = (unsigned char)(v >> 8);
        *p++ = (unsigned char)v;
    }
    *out = p;
}

static PyObject *encoded(const uint32_t *hashes, Py_ssize_t count) {
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, 5 + 5 * count);
    if (bytes == NULL) return NULL;
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(bytes), *p = start;
    if (count < 16) {
        *p++ = (unsigned char)(0x90 | count);
    } else if (count <= 0xffff) {
        *p++ = 0xdc;
        *p++ = (unsigned char)(count >> 8);
        *p++ = (unsigned char)count;
    } else {
        *p++ = 0xdd;
        *p++ = (unsigned char)(count >> 24);
        *p++ = (unsigned char)(count >> 16);
        *p++ = (unsigned char)(count >> 8);
        *p++ = (unsigned char)count;
    }
    for (Py_ssize_t i = 0; i < count; i++) put_uint(&p, hashes[i]);
    if (_PyBytes_Resize(&bytes, p - start) < 0) return NULL;
    return bytes;
}

static PyObject *Raw; /* msgspec.Raw: a record writes the hashes' MessagePack as they are */
static PyObject *NO_BLOCKS, *NO_BLOCKS_RAW; /* () and its Raw */

static PyObject *hashes_tuple(const uint32_t *hashes, Py_ssize_t count) {
    PyObject *tuple = PyTuple_New(count);
    for (Py_ssize_t i = 0; tuple != NULL && i < count; i++) {
        PyObject *h = PyLong_FromUnsignedLong(hashes[i]);
        if (h == NULL) Py_CLEAR(tuple);
        else PyTuple_SET_ITEM(tuple, i, h);
    }
    return tuple;
}

static PyObject *hashes_raw(const uint32_t *hashes, Py_ssize_t count) {
    PyObject *bytes = encoded(hashes, count);
    if (bytes == NULL) return NULL;
    PyObject *raw = PyObject_CallOneArg(Raw, bytes);
    Py_DECREF(bytes);
    return raw;
}

PyDoc_STRVAR(blocks_doc,
"blocks(body, block_chars, max_blocks, as_raw) -> (hashes, home) | msgspec.Raw | None\n\n"
"The block hashes of a request body's prompt and its home (policy.Prompt.hashed): a tuple of ints and an int or\n"
"None; with `as_raw` only the msgspec.Raw of the hashes' MessagePack array (a routing record's field). None where\n"
"policy.py must walk the body itself (a lone surrogate in its text).");

static PyObject *blocks(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "blocks(body: dict, block_chars: int, max_blocks: int, as_raw: bool)");
        return NULL;
    }
    Py_ssize_t block = PyLong_AsSsize_t(args[1]);
    if (block == -1 && PyErr_Occurred()) return NULL;
    if (block <= 0) {
        PyErr_SetString(PyExc_ValueError, "block_chars must be positive");
        return NULL;
    }
    int overflow;
    long long asked = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (asked == -1 && PyErr_Occurred()) return NULL;
    /* as policy.block_hashes: none below 1; above what any text could hold, what the text holds */
    Py_ssize_t most = PY_SSIZE_T_MAX / block / 2;
    Py_ssize_t max = overflow > 0 || asked > most ? most : asked < 0 || overflow < 0 ? 0 : (Py_ssize_t)asked;
    int as_raw = PyObject_IsTrue(args[3]);
    if (as_raw < 0) return NULL;

    Parts ps = {.capacity = 16, .enough_bytes = block * max, .enough_chars = block};
    ps.parts = ps.inline_parts;
    PyObject *result = NULL, *hashes = NULL, *home = NULL;
    uint32_t inline_hashes[64];
    Crc c = {.state = 0xFFFFFFFFu, .block = block, .max = max, .hashes = inline_hashes};
    Lead *lead = NULL;
    int r = walk(&ps, args[0]);
    if (r == FAILED) goto done;
    if (r == UNSUPPORTED) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (ps.bytes >= block && max > 0) {
        Py_ssize_t room = ps.bytes / block < max ? ps.bytes / block : max; /* the most blocks this text has */
        if (room > 64 && (c.hashes = PyMem_Malloc(sizeof(uint32_t) * room)) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t i = 0;
        if (ps.count >= 2 && ps.parts[0].bytes + 1 + ps.parts[1].bytes >= block) {
            lead = feed_lead(&c, &ps.parts[0], &ps.parts[1]);
            i = 2;
        }
        for (; i < ps.count && c.count < max; i++) {
            if (i) feed(&c, (const unsigned char *)"\n", 1);
            feed(&c, ps.parts[i].data, ps.parts[i].bytes);
        }
    }
    /* Everything read from the body and the lead is read before any Python object is made: making one may collect
     * garbage, and a finalizer may call blocks() again and replace the lead. */
    uint32_t home_value = 0;
    int homed = 0;
    if (c.count > 0) {
        if (lead != NULL && lead->homed) {
            home_value = lead->home;
            homed = 1;
        } else {
            homed = home_of(ps.parts, ps.count, ps.chars, block, &home_value);
        }
    }
    if (lead != NULL && c.count == lead->crc.count) { /* no block past the lead: its hashes, made once */
        uint64_t generation = lead->generation;
        PyObject **kept = &lead->hashes[as_raw];
        if (*kept != NULL) {
            hashes = Py_NewRef(*kept);
        } else {
            hashes = as_raw ? hashes_raw(c.hashes, c.count) : hashes_tuple(c.hashes, c.count);
            if (hashes != NULL && lead->generation == generation && *kept == NULL) *kept = Py_NewRef(hashes);
        }
    } else if (c.count == 0) { /* no whole block: the same empty array each time */
        hashes = Py_NewRef(as_raw ? NO_BLOCKS_RAW : NO_BLOCKS);
    } else {
        hashes = as_raw ? hashes_raw(c.hashes, c.count) : hashes_tuple(c.hashes, c.count);
    }
    if (hashes == NULL || as_raw) { /* a record's field: no home wanted */
        result = hashes;
        hashes = NULL;
        goto done;
    }
    home = homed ? PyLong_FromUnsignedLong(home_value) : Py_NewRef(Py_None);
    if (home == NULL) goto done;
    result = PyTuple_Pack(2, hashes, home);
done:
    Py_XDECREF(hashes);
    Py_XDECREF(home);
    if (c.hashes != inline_hashes) PyMem_Free(c.hashes);
    if (ps.parts != ps.inline_parts) PyMem_Free(ps.parts);
    return result;
}

static PyMethodDef methods[] = {
    {"blocks", (PyCFunction)(void (*)(void))blocks, METH_FASTCALL, blocks_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_prompt", .m_doc = "A prompt's block hashes (services/router/policy.py)",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__prompt(void) {
    crc_tables();
    PyObject *msgspec = PyImport_ImportModule("msgspec");
    if (msgspec == NULL) return NULL;
    Raw = PyObject_GetAttrString(msgspec, "Raw");
    Py_DECREF(msgspec);
    if (Raw == NULL || (NO_BLOCKS = PyTuple_New(0)) == NULL || (NO_BLOCKS_RAW = hashes_raw(NULL, 0)) == NULL) return NULL;
#define KEY(name, text) \
    if ((name = PyUnicode_InternFromString(text)) == NULL) return NULL
    KEY(K_messages, "messages");
    KEY(K_role, "role");
    KEY(K_content, "content");
    KEY(K_text, "text");
    KEY(K_system, "system");
    KEY(K_instructions, "instructions");
    KEY(K_prompt, "prompt");
    KEY(K_input, "input");
    KEY(EMPTY, "");
    return PyModule_Create(&module);
}
