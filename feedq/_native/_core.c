/*
 * feedq._native._core: the per-record loops of feedq in C.
 *
 *   crc32c / masked_crc32c   CRC32C (Castagnoli), SSE4.2 when the CPU has it,
 *                            slicing-by-8 tables otherwise.
 *   scan_tfrecords           TFRecord framing: every complete record of a buffer,
 *                            both CRCs checked.
 *   parse_examples           tf.train.Example wire format -> columns.
 *   pad_ragged               values + row splits -> dense [B, width].
 *   read_window              a file's bytes read straight into a new bytes
 *                            object after the unread tail of the last one.
 *   shuffle_take             a RandomShuffleQueue's draws: rows out of columns,
 *                            the storage compacted (partial Fisher-Yates).
 *   shuffle_sources          the same draws as index moves (object columns).
 *   resample_bilinear        an RGB box resized as Pillow's antialiased
 *                            bilinear filter does it, bit for bit.
 *
 * Every function takes buffers (bytes, memoryview, NumPy arrays) and writes
 * into preallocated writable buffers or returns bytes; the GIL is released
 * while a whole buffer is walked. Arguments are validated by the Python layer
 * (feedq/_native/_api.py), and checked again here so that no input, however
 * hostile, reads or writes outside a buffer. The pure-Python twin
 * (feedq/_native/_pure.py) mirrors each function, error codes included.
 *
 * Only the CPython API is used (no NumPy headers): a compiler is all the build
 * needs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define FEEDQ_X86_CRC 1
#include <nmmintrin.h>
#endif

/* ------------------------------------------------------------------ bytes */

static inline uint32_t
load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline uint64_t
load_le64(const uint8_t *p)
{
    return (uint64_t)load_le32(p) | ((uint64_t)load_le32(p + 4) << 32);
}

static inline void
store_i64(uint8_t *p, int64_t v)
{
    memcpy(p, &v, 8); /* the output buffers are native-endian int64 */
}

/* ------------------------------------------------------------------ CRC32C */

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define MASK_DELTA 0xA282EAD8u

static uint32_t crc_table[8][256];

static void
crc_init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    /* crc_table[k][i]: byte i followed by k zero bytes */
    for (int k = 1; k < 8; k++)
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = crc_table[k - 1][i];
            crc_table[k][i] = (c >> 8) ^ crc_table[0][c & 0xFF];
        }
}

/* Slicing-by-8: eight bytes per step, one table lookup per byte. */
static uint32_t
crc_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint32_t lo = c ^ load_le32(p);
        uint32_t hi = load_le32(p + 4);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return ~c;
}

#ifdef FEEDQ_X86_CRC
/* SSE4.2 `crc32`: compiled for that target only; called only when the CPU
 * reports it (see PyInit__core). */
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
#if defined(__x86_64__)
    {
        uint64_t c64 = c;
        while (n >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            c64 = _mm_crc32_u64(c64, v);
            p += 8;
            n -= 8;
        }
        c = (uint32_t)c64;
    }
#endif
    while (n >= 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        c = _mm_crc32_u32(c, v);
        p += 4;
        n -= 4;
    }
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}
#endif

typedef uint32_t (*crc_fn_t)(uint32_t, const uint8_t *, size_t);
static crc_fn_t crc_fn = crc_sw;
static int crc_hw_available = 0;

static inline uint32_t
mask_crc(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + MASK_DELTA;
}

/* Buffers at least this long are checksummed with the GIL released. */
#define CRC_NOGIL_BYTES 65536

static int
parse_crc_value(PyObject *obj, uint32_t *out)
{
    unsigned long long v;
    if (obj == NULL) {
        *out = 0;
        return 0;
    }
    if (!PyLong_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "value must be an int");
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(obj);
    if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > 0xFFFFFFFFull) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "value must be in [0, 2**32)");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static uint32_t
crc_buffer(uint32_t value, const Py_buffer *b)
{
    uint32_t c;
    if (b->len >= CRC_NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        c = crc_fn(value, (const uint8_t *)b->buf, (size_t)b->len);
        Py_END_ALLOW_THREADS
    } else {
        c = crc_fn(value, (const uint8_t *)b->buf, (size_t)b->len);
    }
    return c;
}

static PyObject *
py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer b;
    PyObject *vobj = NULL;
    uint32_t value, c;
    if (!PyArg_ParseTuple(args, "y*|O:crc32c", &b, &vobj))
        return NULL;
    if (parse_crc_value(vobj, &value) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    c = crc_buffer(value, &b);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *
py_masked_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer b;
    uint32_t c;
    if (!PyArg_ParseTuple(args, "y*:masked_crc32c", &b))
        return NULL;
    c = crc_buffer(0, &b);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(mask_crc(c));
}

/* Test hooks: the table path must be testable on a CPU with SSE4.2. */
static PyObject *
py_crc32c_sw(PyObject *self, PyObject *args)
{
    Py_buffer b;
    PyObject *vobj = NULL;
    uint32_t value, c;
    if (!PyArg_ParseTuple(args, "y*|O:crc32c_sw", &b, &vobj))
        return NULL;
    if (parse_crc_value(vobj, &value) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    c = crc_sw(value, (const uint8_t *)b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *
py_use_hardware_crc(PyObject *self, PyObject *args)
{
    int on, was;
    if (!PyArg_ParseTuple(args, "p:use_hardware_crc", &on))
        return NULL;
#ifdef FEEDQ_X86_CRC
    was = crc_fn == crc_hw;
    crc_fn = (on && crc_hw_available) ? crc_hw : crc_sw;
#else
    was = 0;
#endif
    return PyBool_FromLong(was);
}

static PyObject *
py_crc_implementation(PyObject *self, PyObject *noargs)
{
#ifdef FEEDQ_X86_CRC
    if (crc_fn == crc_hw)
        return PyUnicode_FromString("sse4.2");
#endif
    return PyUnicode_FromString("table");
}

/* ------------------------------------------------------------------ TFRecord */

enum {
    SCAN_OK = 0,
    SCAN_INCOMPLETE = 1,
    SCAN_BAD_LENGTH_CRC = 2,
    SCAN_LENGTH_TOO_LARGE = 3,
    SCAN_BAD_DATA_CRC = 4,
};

/*
 * scan_tfrecords(buf, start, max_records, max_record_bytes, check_data_crc,
 *                out_starts, out_lengths) -> (count, stop, status)
 *
 * From `start`, find consecutive records
 *     uint64 length | uint32 masked_crc(length) | data | uint32 masked_crc(data)
 * writing each record's start (of its header) and data length as int64. Stops
 * at max_records or when the output buffers are full (SCAN_OK), at bytes that
 * are not a whole record (SCAN_INCOMPLETE; not an error), or at the first bad
 * record, which is not counted: `stop` is its offset. The length is checked
 * (CRC, then max_record_bytes) before it is used, and compared with the bytes
 * left without any addition that could overflow.
 */
static PyObject *
py_scan_tfrecords(PyObject *self, PyObject *args)
{
    Py_buffer buf, os, ol;
    Py_ssize_t start, max_records, count = 0, cap;
    unsigned long long max_bytes;
    int check, status = SCAN_OK;
    size_t pos, end;
    const uint8_t *p;
    uint8_t *so, *lo;
    PyObject *res = NULL;

    if (!PyArg_ParseTuple(args, "y*nnKpw*w*:scan_tfrecords", &buf, &start, &max_records,
                          &max_bytes, &check, &os, &ol))
        return NULL;
    if (start < 0 || start > buf.len || max_records < 0) {
        PyErr_SetString(PyExc_ValueError, "start or max_records out of range");
        goto done;
    }
    cap = os.len / 8 < ol.len / 8 ? os.len / 8 : ol.len / 8;
    if (max_records < cap)
        cap = max_records;
    p = (const uint8_t *)buf.buf;
    end = (size_t)buf.len;
    pos = (size_t)start;
    so = (uint8_t *)os.buf;
    lo = (uint8_t *)ol.buf;

    Py_BEGIN_ALLOW_THREADS
    while (count < cap) {
        size_t rem = end - pos;
        uint64_t len;
        if (rem == 0)
            break;
        if (rem < 12) {
            status = SCAN_INCOMPLETE;
            break;
        }
        len = load_le64(p + pos);
        if (mask_crc(crc_fn(0, p + pos, 8)) != load_le32(p + pos + 8)) {
            status = SCAN_BAD_LENGTH_CRC;
            break;
        }
        if (len > (uint64_t)max_bytes) {
            status = SCAN_LENGTH_TOO_LARGE;
            break;
        }
        if (rem < 16 || len > (uint64_t)(rem - 16)) {
            status = SCAN_INCOMPLETE;
            break;
        }
        if (check && mask_crc(crc_fn(0, p + pos + 12, (size_t)len)) !=
                         load_le32(p + pos + 12 + (size_t)len)) {
            status = SCAN_BAD_DATA_CRC;
            break;
        }
        store_i64(so + 8 * count, (int64_t)pos);
        store_i64(lo + 8 * count, (int64_t)len);
        count++;
        pos += 16 + (size_t)len;
    }
    Py_END_ALLOW_THREADS

    res = Py_BuildValue("nni", count, (Py_ssize_t)pos, status);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&os);
    PyBuffer_Release(&ol);
    return res;
}

/* ------------------------------------------------------------------ buffers */

/* A read-write buffer owning malloc'd memory: flat outputs are handed to
 * NumPy (np.frombuffer) without a copy; the memory is freed with the object,
 * which every view keeps alive. */
typedef struct {
    PyObject_HEAD
    void *buf;
    Py_ssize_t len;
} OwnedBuffer;

static int
owned_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    OwnedBuffer *ob = (OwnedBuffer *)self;
    return PyBuffer_FillInfo(view, self, ob->buf, ob->len, 0, flags);
}

static void
owned_dealloc(PyObject *self)
{
    free(((OwnedBuffer *)self)->buf);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs owned_as_buffer = {owned_getbuffer, NULL};

static PyTypeObject OwnedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "feedq._native._core.OwnedBuffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_dealloc = owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory filled by the C core, exposed through the buffer protocol.",
};

/* Wrap `buf` (malloc'd, `len` bytes; taken over, also on failure). */
static PyObject *
owned_buffer(void *buf, size_t len)
{
    OwnedBuffer *ob = PyObject_New(OwnedBuffer, &OwnedBufferType);
    if (ob == NULL) {
        free(buf);
        return NULL;
    }
    ob->buf = buf;
    ob->len = (Py_ssize_t)len;
    return (PyObject *)ob;
}

/* ------------------------------------------------------------------ Example */

/* Reason codes of a record that is not a valid serialized Example. Protobuf
 * (upb) rejects exactly these records; the code says which check failed
 * first. */
enum {
    EX_OK = 0,
    EX_TRUNCATED = 1,      /* a varint, fixed-size value or tag runs past its message */
    EX_BAD_VARINT = 2,     /* a varint longer than 10 bytes (a length: than 5) */
    EX_BAD_TAG = 3,        /* a tag longer than 5 bytes, above 2**32, or field number 0 */
    EX_BAD_WIRE_TYPE = 4,  /* wire type 6 or 7 */
    EX_BAD_LENGTH = 5,     /* a length-delimited field longer than the rest of its message */
    EX_BAD_PACKED = 6,     /* packed floats not a multiple of 4 bytes, or a packed varint
                              crossing the end of its run */
    EX_BAD_UTF8 = 7,       /* a feature name (map key) that is not UTF-8 */
    EX_BAD_GROUP = 8,      /* an end-group tag without its start, or a group left open */
    EX_TOO_DEEP = 9,       /* groups nested beyond protobuf's depth limit */
    /* not a record error: */
    EX_RECORD_RANGE = -1,  /* a record's start/length lies outside the buffer */
    EX_NO_MEMORY = -2,
};

enum { K_BYTES = 1, K_FLOAT = 2, K_INT64 = 3 };

#define WT_VARINT 0
#define WT_FIXED64 1
#define WT_LEN 2
#define WT_SGROUP 3
#define WT_EGROUP 4
#define WT_FIXED32 5

/* protobuf's default recursion budget: messages and groups nested deeper than
 * 100 levels below the Example are rejected */
#define DEPTH_LIMIT 100
#define LVL_EXAMPLE 0
#define LVL_FEATURES 1
#define LVL_ENTRY 2
#define LVL_FEATURE 3
#define LVL_LIST 4

static int
rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return EX_OK;
    }
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return EX_TRUNCATED;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return EX_OK;
        }
    }
    return EX_BAD_VARINT;
}

/* A varint of at most 5 bytes (tags and lengths). */
static inline int
rd_varint5(const uint8_t **pp, const uint8_t *end, uint64_t *out, int too_long)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (p >= end)
            return EX_TRUNCATED;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return EX_OK;
        }
    }
    return too_long;
}

static inline int
rd_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt)
{
    uint64_t v;
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { /* one-byte tag: the common case */
        v = *p;
        *pp = p + 1;
    } else {
        int e = rd_varint5(pp, end, &v, EX_BAD_TAG);
        if (e)
            return e;
        if (v > 0xFFFFFFFFull)
            return EX_BAD_TAG;
    }
    *field = (uint32_t)(v >> 3);
    *wt = (int)(v & 7);
    if (*field == 0)
        return EX_BAD_TAG;
    return EX_OK;
}

/* The length of a length-delimited field; it must fit in [*pp, end). */
static inline int
rd_len(const uint8_t **pp, const uint8_t *end, size_t *out)
{
    uint64_t v;
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        v = *p;
        p++;
    } else {
        int e = rd_varint5(&p, end, &v, EX_BAD_VARINT);
        if (e)
            return e;
    }
    if (v >= 0x7FFFFFFFull || v > (uint64_t)(end - p))
        return EX_BAD_LENGTH;
    *pp = p;
    *out = (size_t)v;
    return EX_OK;
}

/* Skip one field whose tag was read: an unknown field, or a known field of an
 * unexpected wire type (which protobuf also keeps as unknown). `depth` is the
 * nesting level of the message holding it. */
static int
skip_field(const uint8_t **pp, const uint8_t *end, uint32_t field, int wt, int depth)
{
    const uint8_t *p = *pp;
    uint64_t v;
    size_t n;
    int e;
    switch (wt) {
    case WT_VARINT:
        e = rd_varint(&p, end, &v);
        if (e)
            return e;
        break;
    case WT_FIXED64:
        if (end - p < 8)
            return EX_TRUNCATED;
        p += 8;
        break;
    case WT_LEN:
        e = rd_len(&p, end, &n);
        if (e)
            return e;
        p += n;
        break;
    case WT_FIXED32:
        if (end - p < 4)
            return EX_TRUNCATED;
        p += 4;
        break;
    case WT_SGROUP:
        if (depth + 1 > DEPTH_LIMIT)
            return EX_TOO_DEEP;
        for (;;) {
            uint32_t f2;
            int wt2;
            if (p >= end)
                return EX_BAD_GROUP; /* the group is never closed */
            e = rd_tag(&p, end, &f2, &wt2);
            if (e)
                return e;
            if (wt2 == WT_EGROUP) {
                if (f2 != field)
                    return EX_BAD_GROUP;
                break;
            }
            e = skip_field(&p, end, f2, wt2, depth + 1);
            if (e)
                return e;
        }
        break;
    case WT_EGROUP:
        return EX_BAD_GROUP; /* an end without a start */
    default:
        return EX_BAD_WIRE_TYPE;
    }
    *pp = p;
    return EX_OK;
}

/* Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as
 * protobuf checks proto3 strings. */
static int
utf8_valid(const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    while (p < end) {
        uint8_t b = *p;
        if (b < 0x80) {
            p++;
            continue;
        }
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF)
            k = 1;
        else if (b == 0xE0) {
            k = 2;
            lo = 0xA0;
        } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
            k = 2;
        else if (b == 0xED) {
            k = 2;
            hi = 0x9F;
        } else if (b == 0xF0) {
            k = 3;
            lo = 0x90;
        } else if (b >= 0xF1 && b <= 0xF3)
            k = 3;
        else if (b == 0xF4) {
            k = 3;
            hi = 0x8F;
        } else
            return 0;
        if ((size_t)(end - p) < k + 1)
            return 0;
        if (p[1] < lo || p[1] > hi)
            return 0;
        for (size_t j = 2; j <= k; j++)
            if (p[j] < 0x80 || p[j] > 0xBF)
                return 0;
        p += k + 1;
    }
    return 1;
}

#if defined(__GNUC__)
#define POPCOUNT64(x) __builtin_popcountll(x)
#define CTZ64(x) __builtin_ctzll(x)
#define CLZ64(x) __builtin_clzll(x)
#else
static int POPCOUNT64(uint64_t x) { int n = 0; while (x) { x &= x - 1; n++; } return n; }
static int CTZ64(uint64_t x) { int n = 0; while (!(x & 1)) { x >>= 1; n++; } return n; }
static int CLZ64(uint64_t x) { int n = 0; while (!(x >> 63)) { x <<= 1; n++; } return n; }
#endif

/* Count the varints of a packed run [p, end), adding to *count: each byte
 * without the continuation bit ends one. Ten continuation bytes in a row make
 * a varint too long (EX_BAD_VARINT); the run must end on a varint's last byte
 * (EX_BAD_PACKED). Eight bytes per step: `run` carries the continuation bytes
 * at the end of the bytes seen so far. */
static int
count_varints(const uint8_t *p, const uint8_t *end, int64_t *count)
{
    const uint64_t HI = 0x8080808080808080ull;
    uint64_t run = 0;
    int64_t c = 0;
    while (end - p >= 8) {
        uint64_t term = ~load_le64(p) & HI; /* flag set: a varint's last byte */
        p += 8;
        if (term == 0) {
            run += 8;
            if (run >= 10)
                return EX_BAD_VARINT;
            continue;
        }
        if (run + (uint64_t)(CTZ64(term) >> 3) >= 10)
            return EX_BAD_VARINT;
        c += POPCOUNT64(term);
        run = (uint64_t)(CLZ64(term) >> 3);
    }
    for (; p < end; p++) {
        if (*p & 0x80) {
            if (++run >= 10)
                return EX_BAD_VARINT;
        } else {
            run = 0;
            c++;
        }
    }
    if (run)
        return EX_BAD_PACKED;
    *count += c;
    return EX_OK;
}

/* Validate one list message (BytesList / FloatList / Int64List body) and
 * count its values. */
static int
list_count(const uint8_t *p, const uint8_t *end, int kind, int64_t *count)
{
    int64_t c = 0;
    while (p < end) {
        uint32_t f;
        int wt, e;
        e = rd_tag(&p, end, &f, &wt);
        if (e)
            return e;
        if (f == 1) {
            if (kind == K_FLOAT && wt == WT_LEN) {
                size_t n;
                e = rd_len(&p, end, &n);
                if (e)
                    return e;
                if (n % 4)
                    return EX_BAD_PACKED;
                c += (int64_t)(n / 4);
                p += n;
                continue;
            }
            if (kind == K_FLOAT && wt == WT_FIXED32) {
                if (end - p < 4)
                    return EX_TRUNCATED;
                p += 4;
                c++;
                continue;
            }
            if (kind == K_INT64 && wt == WT_LEN) {
                size_t n;
                e = rd_len(&p, end, &n);
                if (e)
                    return e;
                e = count_varints(p, p + n, &c);
                if (e)
                    return e;
                p += n;
                continue;
            }
            if (kind == K_INT64 && wt == WT_VARINT) {
                uint64_t v;
                e = rd_varint(&p, end, &v);
                if (e)
                    return e;
                c++;
                continue;
            }
            if (kind == K_BYTES && wt == WT_LEN) {
                size_t n;
                e = rd_len(&p, end, &n);
                if (e)
                    return e;
                p += n;
                c++;
                continue;
            }
        }
        e = skip_field(&p, end, f, wt, LVL_LIST);
        if (e)
            return e;
    }
    *count = c;
    return EX_OK;
}

/* The merged Feature of one map entry: protobuf merges every `value` field of
 * the entry, a kind field of another kind than the current one replaces it
 * (oneof), one of the same kind appends. */
typedef struct {
    int kind;      /* 0: no kind set */
    int64_t count; /* values of that kind, after the last switch */
    int64_t first; /* index (among the entry's kind fields) of the first list of the final run */
    int64_t nseg;  /* kind fields seen */
    const uint8_t *last, *last_end; /* the body of the last list (the whole final run when
                                       nseg - first == 1, the usual case) */
} merged_t;

static int
feature_walk(const uint8_t *p, const uint8_t *end, merged_t *m)
{
    while (p < end) {
        uint32_t f;
        int wt, e;
        e = rd_tag(&p, end, &f, &wt);
        if (e)
            return e;
        if (f >= 1 && f <= 3 && wt == WT_LEN) {
            size_t n;
            int64_t c;
            e = rd_len(&p, end, &n);
            if (e)
                return e;
            e = list_count(p, p + n, (int)f, &c);
            if (e)
                return e;
            if ((int)f != m->kind) {
                m->kind = (int)f;
                m->count = 0;
                m->first = m->nseg;
            }
            m->count += c;
            m->nseg++;
            m->last = p;
            m->last_end = p + n;
            p += n;
            continue;
        }
        e = skip_field(&p, end, f, wt, LVL_FEATURE);
        if (e)
            return e;
    }
    return EX_OK;
}

typedef struct {
    /* request */
    const uint8_t *name;
    Py_ssize_t nlen;
    int kind;
    Py_ssize_t fixed; /* >= 0: float/int64 column of `fixed` values per record; -1: flat values */
    uint8_t *col;     /* the column (fixed) */
    /* per record: the map entry that wins (the last one with this key) */
    const uint8_t *ent;
    const uint8_t *ent_end;
    merged_t m;
    /* flat output (var-len numeric: values; bytes: (start, end) int64 pairs) */
    uint8_t *vbuf;
    size_t vlen, vcap;
} feat_t;

static int
vbuf_reserve(feat_t *ft, size_t more)
{
    size_t need = ft->vlen + more, cap;
    uint8_t *nb;
    if (need <= ft->vcap)
        return 0;
    cap = ft->vcap ? ft->vcap : 4096;
    while (cap < need) {
        if (cap > ((size_t)-1) / 2)
            return -1;
        cap *= 2;
    }
    nb = (uint8_t *)realloc(ft->vbuf, cap);
    if (nb == NULL)
        return -1;
    ft->vbuf = nb;
    ft->vcap = cap;
    return 0;
}

/* Pass 1 over a record: validate the whole message as protobuf does, and note
 * for each requested feature the entry that wins. */
static int
example_walk(const uint8_t *p, const uint8_t *end, feat_t *fs, Py_ssize_t nf)
{
    Py_ssize_t hint = 0;
    while (p < end) {
        uint32_t f;
        int wt, e;
        e = rd_tag(&p, end, &f, &wt);
        if (e)
            return e;
        if (!(f == 1 && wt == WT_LEN)) {
            e = skip_field(&p, end, f, wt, LVL_EXAMPLE);
            if (e)
                return e;
            continue;
        }
        size_t n;
        e = rd_len(&p, end, &n);
        if (e)
            return e;
        /* Features: a repeated map entry field */
        const uint8_t *q = p, *qe = p + n;
        p = qe;
        while (q < qe) {
            e = rd_tag(&q, qe, &f, &wt);
            if (e)
                return e;
            if (!(f == 1 && wt == WT_LEN)) {
                e = skip_field(&q, qe, f, wt, LVL_FEATURES);
                if (e)
                    return e;
                continue;
            }
            size_t en;
            e = rd_len(&q, qe, &en);
            if (e)
                return e;
            /* one map entry: key (1), value (2) */
            const uint8_t *r = q, *re = q + en, *ent = q;
            const uint8_t *key = NULL;
            size_t klen = 0;
            int unknown = 0;
            merged_t m = {0, 0, 0, 0, NULL, NULL};
            q = re;
            while (r < re) {
                e = rd_tag(&r, re, &f, &wt);
                if (e)
                    return e;
                if (f == 1 && wt == WT_LEN) {
                    size_t kn;
                    e = rd_len(&r, re, &kn);
                    if (e)
                        return e;
                    if (!utf8_valid(r, kn))
                        return EX_BAD_UTF8;
                    key = r;
                    klen = kn;
                    r += kn;
                } else if (f == 2 && wt == WT_LEN) {
                    size_t vn;
                    e = rd_len(&r, re, &vn);
                    if (e)
                        return e;
                    e = feature_walk(r, r + vn, &m);
                    if (e)
                        return e;
                    r += vn;
                } else {
                    /* protobuf (upb) keeps an entry with unknown fields out of the map */
                    e = skip_field(&r, re, f, wt, LVL_ENTRY);
                    if (e)
                        return e;
                    unknown = 1;
                }
            }
            if (unknown)
                continue;
            /* A repeated key: the last entry wins. Look from the feature after the
             * last match: entries usually come in the same order in every record. */
            for (Py_ssize_t j = 0; j < nf; j++) {
                Py_ssize_t i = hint + j < nf ? hint + j : hint + j - nf;
                feat_t *ft = &fs[i];
                if ((size_t)ft->nlen == klen && (klen == 0 || memcmp(ft->name, key, klen) == 0)) {
                    ft->ent = ent;
                    ft->ent_end = re;
                    ft->m = m;
                    hint = i + 1 < nf ? i + 1 : 0;
                    break;
                }
            }
        }
    }
    return EX_OK;
}

/* Decode a varint of at most 8 bytes from 8 readable bytes at p, without a
 * branch per byte: returns its length (1..8), or 0 for a longer one. */
static inline int
varint8(const uint8_t *p, uint64_t *out)
{
    uint64_t w = load_le64(p);
    uint64_t term = ~w & 0x8080808080808080ull;
    if (term == 0)
        return 0;
    int len = (CTZ64(term) >> 3) + 1;
    uint64_t x = len == 8 ? w : w & ((1ull << (8 * len)) - 1);
    x &= 0x7F7F7F7F7F7F7F7Full;
    /* squeeze out bit 7 of every byte */
    x = (x & 0x000000000000007Full) | ((x & 0x0000000000007F00ull) >> 1) |
        ((x & 0x00000000007F0000ull) >> 2) | ((x & 0x000000007F000000ull) >> 3) |
        ((x & 0x0000007F00000000ull) >> 4) | ((x & 0x00007F0000000000ull) >> 5) |
        ((x & 0x007F000000000000ull) >> 6) | ((x & 0x7F00000000000000ull) >> 7);
    *out = x;
    return len;
}

/* Write the values of one list body [s, se) of `kind` at dst[*j...]; at most
 * `count` values in all. The body was validated by pass 1; every step is
 * bounds-checked again all the same (the buffer may be shared). */
static int
emit_list(int kind, const uint8_t *s, const uint8_t *se, uint8_t *dst, int64_t *jp,
          int64_t count, const uint8_t *base)
{
    int64_t j = *jp;
    size_t n;
    while (s < se) {
        uint32_t lf;
        int lwt;
        if (rd_tag(&s, se, &lf, &lwt))
            return EX_TRUNCATED;
        if (lf == 1 && kind == K_FLOAT && (lwt == WT_LEN || lwt == WT_FIXED32)) {
            size_t cnt;
            if (lwt == WT_LEN) {
                if (rd_len(&s, se, &n) || n % 4)
                    return EX_TRUNCATED;
                cnt = n / 4;
            } else {
                if (se - s < 4)
                    return EX_TRUNCATED;
                cnt = 1;
            }
            if (j + (int64_t)cnt > count)
                return EX_TRUNCATED;
#if (defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__) || defined(_WIN32)
            memcpy(dst + 4 * j, s, 4 * cnt);
#else
            for (size_t t = 0; t < cnt; t++) {
                uint32_t u = load_le32(s + 4 * t);
                memcpy(dst + 4 * (j + (int64_t)t), &u, 4);
            }
#endif
            j += (int64_t)cnt;
            s += 4 * cnt;
        } else if (lf == 1 && kind == K_INT64 && (lwt == WT_LEN || lwt == WT_VARINT)) {
            /* one varint, or a packed run of them (possibly empty) */
            int one = lwt == WT_VARINT;
            const uint8_t *ve = se;
            if (!one) {
                if (rd_len(&s, se, &n))
                    return EX_TRUNCATED;
                ve = s + n;
            }
            while (one || s < ve) {
                uint64_t v;
                int len;
                if (j >= count)
                    return EX_TRUNCATED;
                if (ve - s >= 8 && (len = varint8(s, &v)) != 0)
                    s += len;
                else if (rd_varint(&s, ve, &v))
                    return EX_TRUNCATED;
                store_i64(dst + 8 * j, (int64_t)v);
                j++;
                if (one)
                    break;
            }
        } else if (lf == 1 && kind == K_BYTES && lwt == WT_LEN) {
            if (rd_len(&s, se, &n) || j >= count)
                return EX_TRUNCATED;
            store_i64(dst + 16 * j, (int64_t)(s - base));
            store_i64(dst + 16 * j + 8, (int64_t)(s + n - base));
            j++;
            s += n;
        } else if (skip_field(&s, se, lf, lwt, LVL_LIST)) {
            return EX_TRUNCATED;
        }
    }
    *jp = j;
    return EX_OK;
}

/* Pass 2 for one feature of one record: write the values of the winning
 * entry's final run of lists -- the one list pass 1 noted, or (after a merge)
 * every list from the run's first, found by walking the entry again.
 * `base` is the buffer start (bytes values are returned as offsets into it). */
static int
emit_values(feat_t *ft, int64_t row, const uint8_t *base)
{
    const merged_t *m = &ft->m;
    int kind = m->kind;
    int64_t j = 0;
    size_t esize = kind == K_FLOAT ? 4 : kind == K_INT64 ? 8 : 16;
    uint8_t *dst;
    int e;

    if (m->count == 0)
        return EX_OK; /* an empty list: nothing to write */
    if (ft->fixed >= 0) {
        dst = ft->col + (size_t)row * (size_t)ft->fixed * esize;
    } else {
        if (vbuf_reserve(ft, (size_t)m->count * esize) < 0)
            return EX_NO_MEMORY;
        dst = ft->vbuf + ft->vlen;
    }
    if (m->nseg - m->first == 1) {
        e = emit_list(kind, m->last, m->last_end, dst, &j, m->count, base);
        if (e)
            return e;
    } else {
        const uint8_t *r = ft->ent, *re = ft->ent_end;
        int64_t seg = 0;
        while (r < re) {
            uint32_t f;
            int wt;
            size_t n;
            if (rd_tag(&r, re, &f, &wt))
                return EX_TRUNCATED;
            if (!(f == 2 && wt == WT_LEN)) {
                if (skip_field(&r, re, f, wt, LVL_ENTRY))
                    return EX_TRUNCATED;
                continue;
            }
            if (rd_len(&r, re, &n))
                return EX_TRUNCATED;
            const uint8_t *q = r, *qe = r + n;
            r = qe;
            while (q < qe) {
                if (rd_tag(&q, qe, &f, &wt))
                    return EX_TRUNCATED;
                if (!(f >= 1 && f <= 3 && wt == WT_LEN)) {
                    if (skip_field(&q, qe, f, wt, LVL_FEATURE))
                        return EX_TRUNCATED;
                    continue;
                }
                if (rd_len(&q, qe, &n))
                    return EX_TRUNCATED;
                const uint8_t *ls = q;
                q += n;
                if (seg++ < m->first)
                    continue;
                if ((int)f != kind)
                    return EX_TRUNCATED; /* cannot happen after pass 1 */
                e = emit_list(kind, ls, q, dst, &j, m->count, base);
                if (e)
                    return e;
            }
        }
    }
    if (j != m->count)
        return EX_TRUNCATED;
    if (ft->fixed < 0)
        ft->vlen += (size_t)j * esize;
    return EX_OK;
}

/*
 * parse_examples(buf, starts, lengths, names, kinds, fixed, cols,
 *                out_kinds, out_counts) -> (error_index, error_code, flats)
 *
 * buf: the records' buffer; starts, lengths: int64 [B]; names: tuple of F
 * bytes; kinds: bytes of F kind codes (1 bytes, 2 float, 3 int64); fixed:
 * tuple of F ints (>= 0: values per record, written into cols[f], a writable
 * [B * fixed] float32/int64 buffer, for records of that kind and count; -1:
 * flat values); out_kinds: writable int8 [F * B] (kind found, 0 = missing);
 * out_counts: writable int64 [F * B] (values found, of whatever kind).
 * flats: tuple of F writable buffers (float32/int64 values, or int64 (start,
 * end) pairs for bytes features) or None for fixed columns. Parsing stops at
 * the first record that is not a valid Example: error_index (else -1) and a
 * reason code EX_*. Negative codes are not record errors: -1 a record outside
 * the buffer (error_index says which), -2 out of memory.
 */
static PyObject *
py_parse_examples(PyObject *self, PyObject *args)
{
    Py_buffer buf, bs, bl, bk, bc, bkinds;
    PyObject *names, *fixed, *cols, *res = NULL, *flats = NULL;
    Py_buffer *colviews = NULL;
    feat_t *fs = NULL;
    Py_ssize_t nf = 0, ncols = 0, B, i;
    int64_t err_index = -1;
    int err = EX_OK;

    if (!PyArg_ParseTuple(args, "y*y*y*O!y*O!O!w*w*:parse_examples", &buf, &bs, &bl,
                          &PyTuple_Type, &names, &bkinds, &PyTuple_Type, &fixed,
                          &PyTuple_Type, &cols, &bk, &bc))
        return NULL;
    B = bs.len / 8;
    nf = PyTuple_GET_SIZE(names);
    if (bl.len != bs.len || PyTuple_GET_SIZE(fixed) != nf || PyTuple_GET_SIZE(cols) != nf ||
        bkinds.len != nf || bk.len < nf * B || bc.len < nf * B * 8) {
        PyErr_SetString(PyExc_ValueError, "parse_examples: inconsistent argument sizes");
        goto done;
    }
    fs = (feat_t *)calloc(nf ? (size_t)nf : 1, sizeof(feat_t));
    colviews = (Py_buffer *)calloc(nf ? (size_t)nf : 1, sizeof(Py_buffer));
    if (fs == NULL || colviews == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < nf; i++) {
        feat_t *ft = &fs[i];
        PyObject *nm = PyTuple_GET_ITEM(names, i);
        PyObject *col = PyTuple_GET_ITEM(cols, i);
        if (!PyBytes_Check(nm)) {
            PyErr_SetString(PyExc_TypeError, "parse_examples: names must be bytes");
            goto done;
        }
        ft->name = (const uint8_t *)PyBytes_AS_STRING(nm);
        ft->nlen = PyBytes_GET_SIZE(nm);
        ft->kind = ((const uint8_t *)bkinds.buf)[i];
        ft->fixed = PyLong_AsSsize_t(PyTuple_GET_ITEM(fixed, i));
        if (ft->fixed == -1 && PyErr_Occurred())
            goto done;
        if (ft->kind < K_BYTES || ft->kind > K_INT64 || ft->fixed < -1 ||
            (ft->kind == K_BYTES && ft->fixed != -1)) {
            PyErr_SetString(PyExc_ValueError, "parse_examples: bad feature kind or size");
            goto done;
        }
        if (ft->fixed >= 0) {
            size_t es = ft->kind == K_FLOAT ? 4 : 8;
            if (PyObject_GetBuffer(col, &colviews[i], PyBUF_WRITABLE) < 0)
                goto done;
            ncols = i + 1;
            if (ft->fixed > 0 && (size_t)colviews[i].len / es / (size_t)ft->fixed < (size_t)B) {
                PyErr_SetString(PyExc_ValueError, "parse_examples: a column is too small");
                goto done;
            }
            ft->col = (uint8_t *)colviews[i].buf;
        } else {
            ncols = i + 1; /* colviews[i] stays zeroed: nothing to release */
        }
    }

    Py_BEGIN_ALLOW_THREADS
    const uint8_t *base = (const uint8_t *)buf.buf;
    int8_t *okind = (int8_t *)bk.buf;
    uint8_t *ocount = (uint8_t *)bc.buf;
    for (int64_t r = 0; r < B && !err; r++) {
        int64_t s, l;
        memcpy(&s, (const uint8_t *)bs.buf + 8 * r, 8);
        memcpy(&l, (const uint8_t *)bl.buf + 8 * r, 8);
        for (i = 0; i < nf; i++) {
            fs[i].ent = NULL;
            okind[i * B + r] = 0;
            store_i64(ocount + 8 * (i * B + r), 0);
        }
        if (s < 0 || l < 0 || s > (int64_t)buf.len || l > (int64_t)buf.len - s) {
            err = EX_RECORD_RANGE;
            err_index = r;
            break;
        }
        err = example_walk(base + s, base + s + l, fs, nf);
        if (err) {
            err_index = r;
            break;
        }
        for (i = 0; i < nf && !err; i++) {
            feat_t *ft = &fs[i];
            if (ft->ent == NULL || ft->m.kind == 0)
                continue; /* missing (no entry, or a Feature with no kind) */
            okind[i * B + r] = (int8_t)ft->m.kind;
            store_i64(ocount + 8 * (i * B + r), ft->m.count);
            if (ft->m.kind != ft->kind || (ft->fixed >= 0 && ft->m.count != ft->fixed))
                continue; /* the caller reports it */
            err = emit_values(ft, r, base);
            if (err)
                err_index = r;
        }
    }
    Py_END_ALLOW_THREADS

    if (err == EX_NO_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    flats = PyTuple_New(nf);
    if (flats == NULL)
        goto done;
    for (i = 0; i < nf; i++) {
        PyObject *o;
        if (fs[i].fixed >= 0) {
            o = Py_None;
            Py_INCREF(o);
        } else {
            void *mem = fs[i].vbuf;
            if (fs[i].vlen < fs[i].vcap) { /* give back what the last doubling left over */
                void *shrunk = realloc(mem, fs[i].vlen ? fs[i].vlen : 1);
                if (shrunk != NULL)
                    mem = shrunk;
            }
            fs[i].vbuf = NULL; /* owned by the buffer object now */
            if (mem == NULL && (mem = malloc(1)) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            o = owned_buffer(mem, fs[i].vlen);
            if (o == NULL)
                goto done;
        }
        PyTuple_SET_ITEM(flats, i, o);
    }
    res = Py_BuildValue("LiO", (long long)err_index, err, flats);
done:
    Py_XDECREF(flats);
    if (fs != NULL)
        for (i = 0; i < nf; i++)
            free(fs[i].vbuf);
    if (colviews != NULL)
        for (i = 0; i < ncols; i++)
            if (colviews[i].obj != NULL)
                PyBuffer_Release(&colviews[i]);
    free(fs);
    free(colviews);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bkinds);
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bc);
    return res;
}

/* ------------------------------------------------------------------ padding */

/*
 * pad_ragged(values, itemsize, splits, width, pad, out) -> None
 *
 * Row i of out ([B, width] items of `itemsize` bytes) is values[splits[i]:
 * splits[i+1]] followed by copies of `pad`. splits: int64 [B+1],
 * non-decreasing, within values, rows no longer than width (ValueError
 * otherwise).
 */
static PyObject *
py_pad_ragged(PyObject *self, PyObject *args)
{
    Py_buffer bv, bs, bp, bo;
    Py_ssize_t itemsize, width, B, nvals;
    int bad = 0;
    PyObject *res = NULL;
    if (!PyArg_ParseTuple(args, "y*ny*ny*w*:pad_ragged", &bv, &itemsize, &bs, &width, &bp, &bo))
        return NULL;
    B = bs.len / 8 - 1;
    if (itemsize <= 0 || width < 0 || B < 0 || bp.len != itemsize || bv.len % itemsize ||
        (B > 0 && width > 0 && bo.len / itemsize / width < B)) {
        PyErr_SetString(PyExc_ValueError, "pad_ragged: inconsistent argument sizes");
        goto done;
    }
    nvals = bv.len / itemsize;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *sp = (const uint8_t *)bs.buf;
    int64_t prev;
    memcpy(&prev, sp, 8);
    if (prev < 0 || prev > nvals)
        bad = 1;
    for (Py_ssize_t i = 0; i < B && !bad; i++) {
        int64_t nxt;
        memcpy(&nxt, sp + 8 * (i + 1), 8);
        if (nxt < prev || nxt > nvals || nxt - prev > width) {
            bad = 1;
            break;
        }
        uint8_t *row = (uint8_t *)bo.buf + (size_t)i * (size_t)width * (size_t)itemsize;
        size_t n = (size_t)(nxt - prev) * (size_t)itemsize;
        if (n)
            memcpy(row, (const uint8_t *)bv.buf + (size_t)prev * (size_t)itemsize, n);
        if (itemsize == 8) {
            uint64_t pv;
            memcpy(&pv, bp.buf, 8);
            for (Py_ssize_t k = nxt - prev; k < width; k++)
                memcpy(row + 8 * (size_t)k, &pv, 8);
        } else if (itemsize == 4) {
            uint32_t pv;
            memcpy(&pv, bp.buf, 4);
            for (Py_ssize_t k = nxt - prev; k < width; k++)
                memcpy(row + 4 * (size_t)k, &pv, 4);
        } else {
            for (Py_ssize_t k = nxt - prev; k < width; k++)
                memcpy(row + (size_t)k * (size_t)itemsize, bp.buf, (size_t)itemsize);
        }
        prev = nxt;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "pad_ragged: bad row splits");
        goto done;
    }
    res = Py_None;
    Py_INCREF(res);
done:
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bo);
    return res;
}

/* ------------------------------------------------------------ bytes values */

/*
 * take_bytes(buf, offsets) -> list of bytes
 *
 * offsets: int64 [N * 2], (start, end) pairs; item i is buf[start:end]. Every
 * pair is checked (0 <= start <= end <= len(buf)) before any object is made
 * (ValueError naming the first bad pair otherwise).
 */
static PyObject *
py_take_bytes(PyObject *self, PyObject *args)
{
    Py_buffer buf, off;
    PyObject *out = NULL;
    Py_ssize_t n, i;
    if (!PyArg_ParseTuple(args, "y*y*:take_bytes", &buf, &off))
        return NULL;
    if (off.len % 16) {
        PyErr_SetString(PyExc_ValueError, "take_bytes: offsets must be int64 (start, end) pairs");
        goto done;
    }
    n = off.len / 16;
    for (i = 0; i < n; i++) {
        int64_t a, b;
        memcpy(&a, (const uint8_t *)off.buf + 16 * i, 8);
        memcpy(&b, (const uint8_t *)off.buf + 16 * i + 8, 8);
        if (a < 0 || b < a || b > (int64_t)buf.len) {
            PyErr_Format(PyExc_ValueError,
                         "take_bytes: pair %zd (%lld, %lld) is outside the buffer of %zd bytes", i,
                         (long long)a, (long long)b, buf.len);
            goto done;
        }
    }
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        int64_t a, b;
        PyObject *item;
        memcpy(&a, (const uint8_t *)off.buf + 16 * i, 8);
        memcpy(&b, (const uint8_t *)off.buf + 16 * i + 8, 8);
        item = PyBytes_FromStringAndSize((const char *)buf.buf + a, (Py_ssize_t)(b - a));
        if (item == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, item);
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&off);
    return out;
}

/* ------------------------------------------------------------------ shuffle */

/*
 * The draws of a RandomShuffleQueue take (feedq/queues/_shuffle.py), a
 * partial Fisher-Yates against the tail. k = len(raw) / 8 uint64 draws of the
 * queue's generator; draw j picks slot
 *
 *     r_j = floor(raw[j] * (n - j) / 2**64)    (uniform in [0, n - j))
 *
 * of the n - j rows still stored, hands that row out as row j, and moves row
 * n-1-j (the last one still stored) into the slot. After k draws the rows
 * kept are [0, n - k), compact. A product's high half can never reach n - j,
 * so no draw can index outside the rows stored.
 */
static inline uint64_t
mulhi64(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
    uint64_t mid = (p0 >> 32) + (uint32_t)p1 + (uint32_t)p2;
    return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
#endif
}

#define SHUFFLE_NOGIL_BYTES 262144

/* shuffle_take(n, raw, cols, outs[, done]) -> None
 *
 * cols, outs: tuples of the same length; outs[i] a writable buffer of k rows
 * (row_bytes = len(outs[i]) / k), cols[i] a writable buffer of at least n such
 * rows. For every column: outs[i] row j = the row draw j picks; cols[i] rows
 * [0, n - k) = the rows kept (a slot's content after the last move into it;
 * rows [n - k, n) hold what the moves left there). Every buffer is checked
 * before any byte is written, so a bad argument changes nothing; one call
 * for all columns, so nothing can interrupt it between two of them. done (a
 * writable buffer of at least one byte, optional): its first byte is set to 1
 * once every column is done, so a caller can tell an exception raised as the
 * call returned (Ctrl-C: the rows are out) from one the call raised (none is).
 */
static PyObject *
py_shuffle_take(PyObject *self, PyObject *args)
{
    Py_ssize_t n, k, ncols, i, held = 0;
    Py_buffer braw, bdone = {0};
    PyObject *cols, *outs, *res = NULL;
    Py_buffer *bufs = NULL;
    size_t total = 0;
    if (!PyArg_ParseTuple(args, "ny*OO|w*:shuffle_take", &n, &braw, &cols, &outs, &bdone))
        return NULL;
    if (bdone.obj != NULL && bdone.len < 1) {
        PyErr_SetString(PyExc_ValueError, "shuffle_take: done must hold at least one byte");
        goto done;
    }
    if (!PyTuple_Check(cols) || !PyTuple_Check(outs) || PyTuple_GET_SIZE(cols) != PyTuple_GET_SIZE(outs)) {
        PyErr_SetString(PyExc_TypeError, "shuffle_take: cols and outs must be tuples of the same length");
        goto done;
    }
    if (braw.len % 8) {
        PyErr_SetString(PyExc_ValueError, "shuffle_take: raw must hold uint64 draws");
        goto done;
    }
    k = braw.len / 8;
    if (n < 0 || k > n) {
        PyErr_Format(PyExc_ValueError, "shuffle_take: %zd draws from %zd rows", k, n);
        goto done;
    }
    ncols = PyTuple_GET_SIZE(cols);
    bufs = PyMem_Calloc((size_t)(2 * ncols + 1), sizeof(Py_buffer));
    if (bufs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < ncols; i++) {
        Py_buffer *c = &bufs[2 * i], *o = &bufs[2 * i + 1];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(cols, i), c, PyBUF_WRITABLE) < 0)
            goto done;
        held++;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(outs, i), o, PyBUF_WRITABLE) < 0)
            goto done;
        held++;
        if (k > 0) {
            Py_ssize_t rb = o->len / k;
            if (o->len % k || (rb > 0 && c->len / rb < n)) {
                PyErr_Format(PyExc_ValueError,
                             "shuffle_take: column %zd: %zd bytes of column and %zd of out do not hold "
                             "%zd and %zd rows", i, c->len, o->len, n, k);
                goto done;
            }
            total += (size_t)o->len;
        }
    }
    if (k > 0 && total > 0) {
        const uint8_t *rp = (const uint8_t *)braw.buf;
        PyThreadState *ts = total >= SHUFFLE_NOGIL_BYTES ? PyEval_SaveThread() : NULL;
        for (i = 0; i < ncols; i++) {
            uint8_t *col = (uint8_t *)bufs[2 * i].buf, *out = (uint8_t *)bufs[2 * i + 1].buf;
            size_t rb = (size_t)(bufs[2 * i + 1].len / k);
            if (rb == 0)
                continue;
            /* Common row sizes get copies of a size the compiler knows (a
             * call to memcpy per row costs more than a short row). */
#define SHUFFLE_ROWS(RB)                                                           \
            for (Py_ssize_t j = 0; j < k; j++) {                                   \
                uint64_t x, last = (uint64_t)(n - 1 - j);                          \
                memcpy(&x, rp + 8 * (size_t)j, 8);                                 \
                uint64_t r = mulhi64(x, (uint64_t)(n - j));                        \
                memcpy(out + (size_t)j * (RB), col + (size_t)r * (RB), (RB));      \
                if (r != last)                                                     \
                    memcpy(col + (size_t)r * (RB), col + (size_t)last * (RB), (RB)); \
            }                                                                      \
            break;
            switch (rb) {
            case 1: SHUFFLE_ROWS(1)
            case 2: SHUFFLE_ROWS(2)
            case 4: SHUFFLE_ROWS(4)
            case 8: SHUFFLE_ROWS(8)
            case 16: SHUFFLE_ROWS(16)
            case 32: SHUFFLE_ROWS(32)
            case 64: SHUFFLE_ROWS(64)
            case 128: SHUFFLE_ROWS(128)
            case 256: SHUFFLE_ROWS(256)
            default: SHUFFLE_ROWS(rb)
            }
#undef SHUFFLE_ROWS
        }
        if (ts != NULL)
            PyEval_RestoreThread(ts);
    }
    if (bdone.obj != NULL)
        ((uint8_t *)bdone.buf)[0] = 1;
    res = Py_None;
    Py_INCREF(res);
done:
    for (i = 0; i < held; i++)
        PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    PyBuffer_Release(&braw);
    if (bdone.obj != NULL)
        PyBuffer_Release(&bdone);
    return res;
}

/* shuffle_sources(n, raw, src, dst, dsrc) -> m
 *
 * The same draws as index moves, for columns that are not byte buffers
 * (object arrays) and for the twin: src (int64 [k]) = the original slot of
 * the row draw j hands out; dst, dsrc (int64, room for k each) = the m slots
 * the moves wrote, in the order first written, and the original slot of the
 * row each holds at the end. So out = col[src]; col[dst] = col[dsrc] (gathered
 * first) leaves col as shuffle_take does. Scratch: one int64 per row (calloc:
 * large ones come as untouched zero pages).
 */
static PyObject *
py_shuffle_sources(PyObject *self, PyObject *args)
{
    Py_ssize_t n, k, m = 0;
    Py_buffer braw, bsrc, bdst, bdsrc;
    PyObject *res = NULL;
    int64_t *map = NULL; /* slot -> 1 + the original slot of the row it holds (0: its own) */
    if (!PyArg_ParseTuple(args, "ny*w*w*w*:shuffle_sources", &n, &braw, &bsrc, &bdst, &bdsrc))
        return NULL;
    k = braw.len / 8;
    if (braw.len % 8 || n < 0 || k > n || bsrc.len / 8 < k || bdst.len / 8 < k || bdsrc.len / 8 < k) {
        PyErr_SetString(PyExc_ValueError, "shuffle_sources: inconsistent argument sizes");
        goto done;
    }
    if (k > 0) {
        map = (int64_t *)calloc((size_t)n, sizeof(int64_t));
        if (map == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        const uint8_t *rp = (const uint8_t *)braw.buf;
        uint8_t *sp = (uint8_t *)bsrc.buf, *dp = (uint8_t *)bdst.buf, *ds = (uint8_t *)bdsrc.buf;
        for (Py_ssize_t j = 0; j < k; j++) {
            uint64_t x;
            int64_t last = (int64_t)(n - 1 - j), r, held;
            memcpy(&x, rp + 8 * (size_t)j, 8);
            r = (int64_t)mulhi64(x, (uint64_t)(n - j));
            held = map[r] ? map[r] - 1 : r;
            memcpy(sp + 8 * (size_t)j, &held, 8);
            if (r != last) {
                if (map[r] == 0) { /* first written: its place in dst */
                    memcpy(dp + 8 * (size_t)m, &r, 8);
                    m++;
                }
                map[r] = map[last] ? map[last] : last + 1;
            }
        }
        for (Py_ssize_t i = 0; i < m; i++) {
            int64_t d, v;
            memcpy(&d, dp + 8 * (size_t)i, 8);
            v = map[d] - 1;
            memcpy(ds + 8 * (size_t)i, &v, 8);
        }
    }
    res = PyLong_FromSsize_t(m);
done:
    free(map);
    PyBuffer_Release(&braw);
    PyBuffer_Release(&bsrc);
    PyBuffer_Release(&bdst);
    PyBuffer_Release(&bdsrc);
    return res;
}

/* ------------------------------------------------------------ resampling */

/*
 * resample_bilinear(src, h, w, row_stride, pixel_stride, x0, y0, x1, y1,
 *                   out, oh, ow, flip[, transposed]) -> None
 *
 * The box [x0, x1) x [y0, y1) of an 8-bit RGB image (3 channels read at
 * src[y * row_stride + x * pixel_stride + c], so RGB, RGBX and strided views
 * of either) resampled to oh x ow RGB pixels written contiguously into out,
 * mirrored left-right when flip is set. The arithmetic is Pillow's
 * antialiased bilinear resize (Image.resize(..., BILINEAR, box=...)) to the
 * bit: the box corners as C floats, the filter's support widened by the
 * downscale factor, coefficients normalised in double and rounded to 22-bit
 * fixed point, two passes through an 8-bit intermediate (rounded, clipped)
 * in Pillow 13's order: horizontal first unless the image loses more than
 * twice as many rows as columns. Pillow's transpose after the resize is
 * the same as writing the columns mirrored, because the vertical pass treats
 * each column alone. The horizontal pass runs through transposes
 * (rs_horizontal_t) unless transposed=0 asks for the direct loop (the
 * tests compare both; the bits are the same).
 *
 * The pure-Python twin and Pillow itself are the references in
 * tests/native/test_resample.py. ValueError for a box outside the image,
 * an empty box, sizes out of range, or buffers too small; the GIL is released
 * while the pixels are computed.
 */
#define RS_BITS 22

static int
rs_coeffs(int in_size, float in0, float in1, int out_size, int **bounds_p, int32_t **kk_p)
{
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale; /* the bilinear (triangle) filter's support is 1 */
    int ksize = (int)ceil(support) * 2 + 1;
    double *k = malloc((size_t)ksize * sizeof *k);
    int32_t *kk = malloc((size_t)out_size * (size_t)ksize * sizeof *kk);
    int *bounds = malloc((size_t)out_size * 2 * sizeof *bounds);
    if (k == NULL || kk == NULL || bounds == NULL) {
        free(k);
        free(kk);
        free(bounds);
        return -1;
    }
    double ss = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        if (xmax < 0)
            xmax = 0;
        if (xmax > ksize)
            xmax = ksize;
        for (int x = 0; x < xmax; x++) {
            double t = (x + xmin - center + 0.5) * ss;
            if (t < 0.0)
                t = -t;
            double v = t < 1.0 ? 1.0 - t : 0.0;
            k[x] = v;
            ww += v;
        }
        int32_t *kx = kk + (size_t)xx * ksize;
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? k[x] / ww : k[x]) : 0.0;
            kx[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << RS_BITS)) : (int32_t)(0.5 + v * (1 << RS_BITS));
        }
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    free(k);
    *bounds_p = bounds;
    *kk_p = kk;
    return ksize;
}

static inline unsigned char
rs_clip8(int32_t v)
{
    v >>= RS_BITS;
    return (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

/* rows x ow RGB pixels from rows of src (pixel_stride bytes a pixel, the
 * filter's column bounds relative to src's first column), mirrored if flip */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define RS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RS_CLONES
#endif

RS_CLONES static void
rs_horizontal(const unsigned char *src, size_t src_row, size_t ps, int rows, int ow, const int *bounds,
              const int32_t *kk, int ksize, unsigned char *dst, size_t dst_row, int flip)
{
    for (int y = 0; y < rows; y++) {
        const unsigned char *row = src + (size_t)y * src_row;
        unsigned char *t = dst + (size_t)y * dst_row;
        for (int xx = 0; xx < ow; xx++) {
            const int32_t *k = kk + (size_t)xx * ksize;
            int xmin = bounds[2 * xx], xmax = bounds[2 * xx + 1];
            int32_t s0 = 1 << (RS_BITS - 1), s1 = s0, s2 = s0;
            const unsigned char *p = row + (size_t)xmin * ps;
            for (int x = 0; x < xmax; x++) {
                s0 += p[0] * k[x];
                s1 += p[1] * k[x];
                s2 += p[2] * k[x];
                p += ps;
            }
            unsigned char *d = t + (size_t)(flip ? ow - 1 - xx : xx) * 3;
            d[0] = rs_clip8(s0);
            d[1] = rs_clip8(s1);
            d[2] = rs_clip8(s2);
        }
    }
}

/* oh rows of n bytes each, every byte filtered down its column (the loop
 * over a row vectorises); row bounds relative to src's first row */
RS_CLONES static void
rs_vertical(const unsigned char *src, size_t src_row, size_t n, int oh, const int *bounds,
            const int32_t *kk, int ksize, unsigned char *dst, size_t dst_row, int32_t *acc)
{
    for (int yy = 0; yy < oh; yy++) {
        const int32_t *k = kk + (size_t)yy * ksize;
        int ymin = bounds[2 * yy], ymax = bounds[2 * yy + 1];
        for (size_t i = 0; i < n; i++)
            acc[i] = 1 << (RS_BITS - 1);
        for (int y = 0; y < ymax; y++) {
            const unsigned char *r = src + (size_t)(ymin + y) * src_row;
            int32_t c = k[y];
            for (size_t i = 0; i < n; i++)
                acc[i] += r[i] * c;
        }
        unsigned char *o = dst + (size_t)yy * dst_row;
        for (size_t i = 0; i < n; i++)
            o[i] = rs_clip8(acc[i]);
    }
}

/* dst row c, pixel r (3 bytes) = src row r, pixel c (ps bytes a pixel), for
 * nrows x ncols source pixels; pixel r lands at nrows - 1 - r when flip.
 * In 16 x 16 tiles, so both sides stay in cache. */
static void
rs_transpose(const unsigned char *src, size_t src_row, size_t ps, int nrows, int ncols,
             unsigned char *dst, size_t dst_row, int flip)
{
    for (int r0 = 0; r0 < nrows; r0 += 16) {
        int r1 = r0 + 16 < nrows ? r0 + 16 : nrows;
        for (int c0 = 0; c0 < ncols; c0 += 16) {
            int c1 = c0 + 16 < ncols ? c0 + 16 : ncols;
            for (int c = c0; c < c1; c++) {
                const unsigned char *sp = src + (size_t)r0 * src_row + (size_t)c * ps;
                unsigned char *dr = dst + (size_t)c * dst_row;
                for (int r = r0; r < r1; r++, sp += src_row) {
                    unsigned char *d = dr + (size_t)(flip ? nrows - 1 - r : r) * 3;
                    d[0] = sp[0];
                    d[1] = sp[1];
                    d[2] = sp[2];
                }
            }
        }
    }
}

/* The horizontal pass (rows x cols pixels of src -> rows x ow RGB pixels of
 * dst, mirrored when flip) done as a vertical one: the pixels transposed so
 * that each source column is a row, filtered down by rs_vertical (which
 * vectorises across the row), transposed back. The same integer sums per
 * output value as rs_horizontal, so the same bits; several times faster for
 * the few taps of a downscale by less than 2, where rs_horizontal's cost is
 * its per-pixel loop. Bounds relative to src's first column. -1: no memory. */
static int
rs_horizontal_t(const unsigned char *src, size_t src_row, size_t ps, int rows, int cols, int ow,
                const int *bounds, const int32_t *kk, int ksize, unsigned char *dst, size_t dst_row,
                int flip)
{
    size_t tr = (size_t)(rows > 0 ? rows : 1) * 3; /* one transposed row: a source column */
    unsigned char *t1 = malloc((size_t)(cols > 0 ? cols : 1) * tr);
    unsigned char *t2 = malloc((size_t)ow * tr);
    int32_t *acc = malloc(tr * sizeof *acc);
    int ok = t1 != NULL && t2 != NULL && acc != NULL;
    if (ok) {
        rs_transpose(src, src_row, ps, rows, cols, t1, tr, 0);
        rs_vertical(t1, tr, (size_t)rows * 3, ow, bounds, kk, ksize, t2, tr, acc);
        rs_transpose(t2, tr, 3, ow, rows, dst, dst_row, flip);
    }
    free(t1);
    free(t2);
    free(acc);
    return ok ? 0 : -1;
}

static PyObject *
py_resample_bilinear(PyObject *self, PyObject *args)
{
    Py_buffer src, out;
    Py_ssize_t h, w, row_stride, pixel_stride;
    double bx0, by0, bx1, by1;
    int oh, ow, flip, transposed = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnnddddw*iip|p:resample_bilinear", &src, &h, &w, &row_stride,
                          &pixel_stride, &bx0, &by0, &bx1, &by1, &out, &oh, &ow, &flip, &transposed))
        return NULL;
    PyObject *res = NULL;
    float x0 = (float)bx0, y0 = (float)by0, x1 = (float)bx1, y1 = (float)by1;
    if (h < 1 || w < 1 || h > (1 << 20) || w > (1 << 20) || oh < 1 || ow < 1 || oh > (1 << 15)
        || ow > (1 << 15)) {
        PyErr_SetString(PyExc_ValueError, "resample_bilinear: image or output size out of range");
        goto done;
    }
    if (pixel_stride < 3 || pixel_stride > 16 || row_stride < w * pixel_stride
        || (h - 1) * row_stride + (w - 1) * pixel_stride + 3 > src.len) {
        PyErr_SetString(PyExc_ValueError, "resample_bilinear: the image does not fit its buffer");
        goto done;
    }
    if ((Py_ssize_t)oh * ow * 3 > out.len) {
        PyErr_SetString(PyExc_ValueError, "resample_bilinear: output buffer too small");
        goto done;
    }
    if (!(x0 >= 0 && y0 >= 0 && x1 <= (float)w && y1 <= (float)h && x1 > x0 && y1 > y0)) {
        PyErr_SetString(PyExc_ValueError, "resample_bilinear: the box is empty or outside the image");
        goto done;
    }
    {
        int *bh = NULL, *bv = NULL;
        int32_t *kh = NULL, *kv = NULL;
        unsigned char *tmp = NULL;
        int32_t *acc = NULL;
        int nomem = 0;
        const unsigned char *base = (const unsigned char *)src.buf;
        unsigned char *dst = (unsigned char *)out.buf;
        size_t ps = (size_t)pixel_stride, rs = (size_t)row_stride, orow = (size_t)ow * 3;
        /* Pillow 13's order (ImagingResampleInner): the vertical pass first
         * when the image loses more than twice as many rows as columns --
         * counted on the whole image, not the box -- so the 8-bit
         * intermediate rounds as Pillow's does. */
        int vertical_first = (h - oh) > 0 && (h - oh) > (w - ow) * 2;
        Py_BEGIN_ALLOW_THREADS
        int ksh = rs_coeffs((int)w, x0, x1, ow, &bh, &kh);
        int ksv = ksh < 0 ? -1 : rs_coeffs((int)h, y0, y1, oh, &bv, &kv);
        if (ksh < 0 || ksv < 0) {
            nomem = 1;
        } else {
            int xfirst = bh[0];
            int cols = bh[2 * ow - 2] + bh[2 * ow - 1] - xfirst;
            if (transposed) {
                for (int i = 0; i < ow; i++)
                    bh[2 * i] -= xfirst;
            }
            if (!vertical_first) {
                int yfirst = bv[0];
                int rows = bv[2 * oh - 2] + bv[2 * oh - 1] - yfirst;
                for (int i = 0; i < oh; i++)
                    bv[2 * i] -= yfirst;
                tmp = malloc((size_t)(rows > 0 ? rows : 1) * orow);
                acc = malloc(orow * sizeof *acc);
                if (tmp == NULL || acc == NULL) {
                    nomem = 1;
                } else {
                    const unsigned char *first = base + (size_t)yfirst * rs;
                    if (transposed)
                        nomem = rs_horizontal_t(first + (size_t)xfirst * ps, rs, ps, rows, cols, ow, bh,
                                                kh, ksh, tmp, orow, flip) < 0;
                    else
                        rs_horizontal(first, rs, ps, rows, ow, bh, kh, ksh, tmp, orow, flip);
                    if (!nomem)
                        rs_vertical(tmp, orow, orow, oh, bv, kv, ksv, dst, orow, acc);
                }
            } else {
                if (!transposed) {
                    for (int i = 0; i < ow; i++)
                        bh[2 * i] -= xfirst;
                }
                size_t n = (size_t)(cols > 0 ? cols : 1) * ps;
                tmp = malloc((size_t)oh * n);
                acc = malloc(n * sizeof *acc);
                if (tmp == NULL || acc == NULL) {
                    nomem = 1;
                } else {
                    /* the last pixel of a row may have only 3 bytes in the buffer */
                    size_t span = (size_t)(cols > 0 ? cols - 1 : 0) * ps + 3;
                    rs_vertical(base + (size_t)xfirst * ps, rs, span, oh, bv, kv, ksv, tmp, n, acc);
                    if (transposed)
                        nomem = rs_horizontal_t(tmp, n, ps, oh, cols, ow, bh, kh, ksh, dst, orow, flip) < 0;
                    else
                        rs_horizontal(tmp, n, ps, oh, ow, bh, kh, ksh, dst, orow, flip);
                }
            }
        }
        free(bh);
        free(bv);
        free(kh);
        free(kv);
        free(tmp);
        free(acc);
        Py_END_ALLOW_THREADS
        if (nomem) {
            PyErr_NoMemory();
            goto done;
        }
        res = Py_None;
        Py_INCREF(res);
    }
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return res;
}

/* ------------------------------------------------------------- line ends */

/*
 * find_byte(buf, start, byte) -> bytearray of int64
 *
 * The positions i (start <= i < len(buf)) where buf[i] == byte, ascending, as
 * native int64s: TextLineReader's newline index. memchr over the buffer with
 * the GIL released; ValueError for a start outside [0, len(buf)] or a byte
 * outside [0, 255] before anything is read.
 */
static PyObject *
py_find_byte(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t start;
    int byte;
    PyObject *out = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ni:find_byte", &buf, &start, &byte))
        return NULL;
    if (start < 0 || start > buf.len) {
        PyErr_Format(PyExc_ValueError, "find_byte: start %zd is outside the buffer of %zd bytes",
                     start, buf.len);
        goto done;
    }
    if (byte < 0 || byte > 255) {
        PyErr_Format(PyExc_ValueError, "find_byte: byte %d is not in [0, 255]", byte);
        goto done;
    }
    {
        const char *base = (const char *)buf.buf;
        const char *end = base + buf.len;
        int64_t *pos = NULL;
        size_t n = 0, cap = 0;
        int nomem = 0;
        Py_BEGIN_ALLOW_THREADS
        const char *p = base + start;
        while (p < end) {
            const char *q = memchr(p, byte, (size_t)(end - p));
            if (q == NULL)
                break;
            if (n == cap) {
                size_t ncap = cap ? 2 * cap : 1024;
                int64_t *np_ = realloc(pos, ncap * sizeof *pos);
                if (np_ == NULL) {
                    nomem = 1;
                    break;
                }
                pos = np_;
                cap = ncap;
            }
            pos[n++] = (int64_t)(q - base);
            p = q + 1;
        }
        Py_END_ALLOW_THREADS
        if (nomem)
            PyErr_NoMemory();
        else
            out = PyByteArray_FromStringAndSize((const char *)pos, (Py_ssize_t)(n * sizeof *pos));
        free(pos);
    }
done:
    PyBuffer_Release(&buf);
    return out;
}

/* ------------------------------------------------------------------ module */

/* ------------------------------------------------------------------ reading */

#if defined(__unix__) || defined(__APPLE__)
#include <errno.h>
#include <unistd.h>

/* read_window(fd, offset, tail, n) -> (bytes, got, errno)
 *
 * `tail` followed by up to `n` bytes of the file at `offset`, read by pread
 * (the file position is neither used nor moved) straight into the new bytes
 * object, with the GIL released: the only copies are the kernel's into the
 * object and the tail's. Fewer than `n` (`got`) at the end of the file, or
 * before an error (`errno` != 0; the bytes before it are kept). The object is
 * shrunk to what was read while this function holds its only reference.
 */
static PyObject *
py_read_window(PyObject *self, PyObject *args)
{
    int fd;
    long long offset;
    Py_buffer tail;
    Py_ssize_t n;
    (void)self;
    if (!PyArg_ParseTuple(args, "iLy*n", &fd, &offset, &tail, &n))
        return NULL;
    if (n < 0 || offset < 0 || tail.len > PY_SSIZE_T_MAX - n) {
        PyBuffer_Release(&tail);
        PyErr_SetString(PyExc_ValueError, "read_window: negative size or offset");
        return NULL;
    }
    Py_ssize_t tl = tail.len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, tl + n);
    if (out == NULL) {
        PyBuffer_Release(&tail);
        return NULL;
    }
    char *p = PyBytes_AS_STRING(out);
    Py_ssize_t got = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    if (tl)
        memcpy(p, tail.buf, (size_t)tl);
    while (got < n) {
        ssize_t k = pread(fd, p + tl + got, (size_t)(n - got), (off_t)(offset + got));
        if (k < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (k == 0)
            break;
        got += (Py_ssize_t)k;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&tail);
    if (got < n && _PyBytes_Resize(&out, tl + got) < 0)
        return NULL;
    return Py_BuildValue("(Nni)", out, got, err);
}
#define READ_WINDOW_METHOD \
    {"read_window", py_read_window, METH_VARARGS, "pread after a tail into new bytes (see feedq._native)."},
#else
#define READ_WINDOW_METHOD
#endif

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int: CRC32C, extending value."},
    {"masked_crc32c", py_masked_crc32c, METH_VARARGS, "masked_crc32c(data) -> int: TFRecord's masked CRC32C."},
    {"crc32c_sw", py_crc32c_sw, METH_VARARGS, "crc32c by slicing-by-8 tables (tests)."},
    {"use_hardware_crc", py_use_hardware_crc, METH_VARARGS,
     "use_hardware_crc(on) -> bool: switch the CPU's crc32 instruction on/off (tests); returns the old setting."},
    {"crc_implementation", py_crc_implementation, METH_NOARGS, "'sse4.2' or 'table'."},
    {"scan_tfrecords", py_scan_tfrecords, METH_VARARGS, "TFRecord framing (see feedq._native)."},
    {"parse_examples", py_parse_examples, METH_VARARGS, "tf.train.Example parsing (see feedq._native)."},
    {"pad_ragged", py_pad_ragged, METH_VARARGS, "values + row splits -> dense (see feedq._native)."},
    {"take_bytes", py_take_bytes, METH_VARARGS, "buffer slices -> bytes objects (see feedq._native)."},
    {"shuffle_take", py_shuffle_take, METH_VARARGS, "shuffle draws: rows out, storage compacted (see feedq._native)."},
    {"shuffle_sources", py_shuffle_sources, METH_VARARGS, "shuffle draws as index moves (see feedq._native)."},
    {"find_byte", py_find_byte, METH_VARARGS, "positions of one byte value (see feedq._native)."},
    {"resample_bilinear", py_resample_bilinear, METH_VARARGS,
     "Pillow's antialiased bilinear resize of an RGB box (see feedq._native)."},
    READ_WINDOW_METHOD
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "feedq._native._core",
    "feedq's compiled per-record loops (use feedq._native, not this module).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    crc_init_tables();
#ifdef FEEDQ_X86_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc_hw_available = 1;
        crc_fn = crc_hw;
    }
#endif
    if (PyType_Ready(&OwnedBufferType) < 0)
        return NULL;
    return PyModule_Create(&moduledef);
}
