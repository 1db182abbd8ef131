/* A small strict JSON reader (RFC 8259) for index.json, manifests and plans.
 *
 * The whole document is parsed into a tree whose values and strings live in one arena, freed at
 * once by js_free. Only what the runtime reads is supported well: objects are looked up by a
 * linear scan (they have tens of members), and numbers keep both a double and, for integers,
 * the exact int64 (offsets and sizes must not pass through a double).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_DEPTH 64 /* nesting; ours is under 10, and recursion must stay bounded */

typedef struct block { struct block *next; size_t used, size; } block;

struct js_doc {
    block *blocks;
    js_value *root;
};

typedef struct {
    js_doc *doc;
    const char *text, *p, *end;
    char *err;
    size_t errlen;
    int failed;
} parser;

/* Arena allocation, 16-byte aligned (values hold doubles and pointers). */
static void *arena_alloc(js_doc *doc, size_t size) {
    size = (size + 15) & ~(size_t)15;
    block *b = doc->blocks;
    if (!b || b->size - b->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        b = malloc(sizeof(block) + 16 + cap);
        if (!b) return NULL;
        b->next = doc->blocks;
        b->used = 0;
        b->size = cap;
        doc->blocks = b;
    }
    /* The data starts 16-aligned after the header: malloc's alignment plus a rounded offset. */
    char *base = (char *)b + ((sizeof(block) + 15) & ~(size_t)15);
    void *out = base + b->used;
    b->used += size;
    return out;
}

void js_free(js_doc *doc) {
    if (!doc) return;
    for (block *b = doc->blocks; b;) {
        block *next = b->next;
        free(b);
        b = next;
    }
    free(doc);
}

const js_value *js_root(const js_doc *doc) { return doc->root; }

const char *js_type_name(js_type type) {
    static const char *names[] = {"null", "a bool", "a number", "a string", "an array", "an object"};
    return names[type];
}

const js_value *js_get(const js_value *object, const char *key) {
    if (!object || object->type != JS_OBJECT) return NULL;
    for (size_t i = 0; i < object->n; i++)
        if (!strcmp(object->keys[i], key)) return object->items[i];
    return NULL;
}

/* ---- the parser ------------------------------------------------------------------------------ */
static void *fail(parser *ps, const char *what) {
    if (ps->failed) return NULL;
    ps->failed = 1;
    int line = 1, col = 1;
    for (const char *q = ps->text; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    if (ps->p >= ps->end) snprintf(ps->err, ps->errlen, "%s at the end of the text (line %d)", what, line);
    else snprintf(ps->err, ps->errlen, "%s at line %d, column %d", what, line, col);
    return NULL;
}

static void skip_space(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static js_value *new_value(parser *ps, js_type type) {
    js_value *v = arena_alloc(ps->doc, sizeof *v);
    if (!v) return fail(ps, "out of memory");
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}

static int hex4(parser *ps, unsigned *out) {
    if (ps->end - ps->p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int d = td__hex_digit((unsigned char)ps->p[i]);
        if (d < 0) return 0;
        v = v * 16 + (unsigned)d;
    }
    ps->p += 4;
    *out = v;
    return 1;
}

static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at ps->p (on its opening quote); returns the decoded, NUL-terminated text. */
static const char *parse_string(parser *ps) {
    ps->p++;
    const char *start = ps->p;
    while (ps->p < ps->end && *ps->p != '"') ps->p += *ps->p == '\\' ? 2 : 1; /* find the end first */
    if (ps->p >= ps->end) return fail(ps, "unterminated string");
    /* Decoding never makes the text longer (an escape of 6 bytes gives at most 3 or, paired, 12 -> 4). */
    char *out = arena_alloc(ps->doc, (size_t)(ps->p - start) + 1);
    if (!out) return fail(ps, "out of memory");
    size_t n = 0;
    const char *close = ps->p;
    ps->p = start;
    while (ps->p < close) {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) return fail(ps, "control character in a string");
        if (c != '\\') { out[n++] = (char)c; ps->p++; continue; }
        char e = ps->p[1];
        ps->p += 2;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (!hex4(ps, &cp)) return fail(ps, "bad \\u escape");
            if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
                if (ps->p + 2 > close || ps->p[0] != '\\' || ps->p[1] != 'u') return fail(ps, "lone surrogate");
                ps->p += 2;
                if (!hex4(ps, &lo) || lo < 0xdc00 || lo > 0xdfff) return fail(ps, "bad surrogate pair");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                return fail(ps, "lone surrogate");
            }
            if (cp == 0) return fail(ps, "\\u0000 in a string");
            n += put_utf8(out + n, cp);
            break;
        }
        default: return fail(ps, "bad escape in a string");
        }
    }
    out[n] = 0;
    ps->p = close + 1;
    return out;
}

static js_value *parse_number(parser *ps) {
    const char *s = ps->p;
    int integral = 1;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "bad number");
    if (*ps->p == '0') ps->p++;
    else while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    if (ps->p < ps->end && *ps->p == '.') {
        integral = 0;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integral = 0;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    char buf[64];
    size_t len = (size_t)(ps->p - s);
    if (len >= sizeof buf) { ps->p = s; return fail(ps, "number too long"); }
    memcpy(buf, s, len);
    buf[len] = 0;
    js_value *v = new_value(ps, JS_NUMBER);
    if (!v) return NULL;
    v->d = strtod(buf, NULL);
    if (integral) {
        errno = 0;
        long long i = strtoll(buf, NULL, 10);
        if (errno != ERANGE) { v->is_int = 1; v->i = i; }
    }
    return v;
}

static js_value *parse_value(parser *ps, int depth);

/* Items (and, for objects, keys) are gathered in a malloc'd list, then copied into the arena. */
static js_value *parse_container(parser *ps, int depth, int object) {
    char close = object ? '}' : ']';
    js_value *v = new_value(ps, object ? JS_OBJECT : JS_ARRAY);
    if (!v) return NULL;
    ps->p++;
    size_t n = 0, cap = 0;
    js_value **items = NULL;
    const char **keys = NULL;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return v; }
    for (;;) {
        const char *key = NULL;
        skip_space(ps);
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"') { fail(ps, "expected a member name in quotes"); break; }
            const char *at = ps->p;
            key = parse_string(ps);
            if (!key) break;
            /* Readers disagree on a repeated name (first or last wins): refused, as tiledsl's are. */
            size_t seen = 0;
            while (seen < n && strcmp(keys[seen], key)) seen++;
            if (seen < n) { ps->p = at; fail(ps, "a member name repeated in one object"); break; }
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != ':') { fail(ps, "expected ':' after a member name"); break; }
            ps->p++;
        }
        js_value *item = parse_value(ps, depth + 1);
        if (!item) break;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            js_value **ni = realloc(items, cap * sizeof *ni);
            const char **nk = ni ? realloc(keys, cap * sizeof *nk) : NULL;
            if (ni) items = ni;
            if (nk) keys = nk;
            if (!ni || !nk) { fail(ps, "out of memory"); break; }
        }
        items[n] = item;
        keys[n++] = key;
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            v->n = n;
            v->items = arena_alloc(ps->doc, n * sizeof *items);
            v->keys = object ? arena_alloc(ps->doc, n * sizeof *keys) : NULL;
            if (!v->items || (object && !v->keys)) { fail(ps, "out of memory"); break; }
            memcpy(v->items, items, n * sizeof *items);
            if (object) memcpy(v->keys, keys, n * sizeof *keys);
            free(items);
            free(keys);
            return v;
        }
        fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    free(items);
    free(keys);
    return NULL;
}

static int literal(parser *ps, const char *word) {
    size_t len = strlen(word);
    if ((size_t)(ps->end - ps->p) < len || memcmp(ps->p, word, len)) return 0;
    ps->p += len;
    return 1;
}

static js_value *parse_value(parser *ps, int depth) {
    if (depth > MAX_DEPTH) return fail(ps, "nested too deeply");
    skip_space(ps);
    if (ps->p >= ps->end) return fail(ps, "expected a value");
    char c = *ps->p;
    if (c == '{' || c == '[') return parse_container(ps, depth, c == '{');
    if (c == '"') {
        const char *s = parse_string(ps);
        js_value *v = s ? new_value(ps, JS_STRING) : NULL;
        if (v) v->s = s;
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(ps);
    if (literal(ps, "true") || literal(ps, "false")) {
        js_value *v = new_value(ps, JS_BOOL);
        if (v) v->boolean = c == 't';
        return v;
    }
    if (literal(ps, "null")) return new_value(ps, JS_NULL);
    return fail(ps, "expected a value");
}

js_doc *js_parse(const char *text, size_t len, char *err, size_t errlen) {
    js_doc *doc = calloc(1, sizeof *doc);
    if (!doc) { snprintf(err, errlen, "out of memory"); return NULL; }
    parser ps = {doc, text, text, text + len, err, errlen, 0};
    doc->root = parse_value(&ps, 0);
    if (doc->root) {
        skip_space(&ps);
        if (ps.p != ps.end) { fail(&ps, "unexpected text after the value"); doc->root = NULL; }
    }
    if (!doc->root) {
        js_free(doc);
        return NULL;
    }
    return doc;
}
