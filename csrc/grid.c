/* Grid formulas: the manifest stores each grid dimension as an expression in Python's syntax
 * ("cdiv(max_seqlen_q, 64)"), which tiledsl/grid.py evaluates in Python. This is the same
 * evaluator in C, with the same operators and meanings: // floors, % takes the divisor's sign,
 * / truncates toward zero (i32 division in the kernel language), shifts take 0..63, and
 * cdiv/min/max/minimum/maximum. Values are int64; an overflow is an error, not a wrap. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define MAX_FORMULA 2000 /* characters, as in grid.py */
#define MAX_DEPTH 64

typedef struct {
    const char *text, *p;
    const td_binding *values;
    int nvalues, depth;
    td_status status;
} evaluator;

static int bad(evaluator *ev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(evaluator *ev, const char *fmt, ...) {
    if (ev->status != TD_OK) return 0;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    ev->status = td__fail(TD_ERROR_PACKAGE, "bad grid formula '%s': %s", ev->text, why);
    return 0;
}

static void skip(evaluator *ev) {
    while (*ev->p == ' ' || *ev->p == '\t') ev->p++;
}

/* True (and consumed) when the next token is `op` -- but not the start of a longer operator. */
static int accept(evaluator *ev, const char *op) {
    skip(ev);
    size_t n = strlen(op);
    if (strncmp(ev->p, op, n)) return 0;
    if (n == 1 && (op[0] == '/' || op[0] == '<' || op[0] == '>') && ev->p[1] == op[0]) return 0;
    ev->p += n;
    return 1;
}

static int floordiv(evaluator *ev, int64_t a, int64_t b, int64_t *out) {
    if (b == 0) return bad(ev, "division by zero");
    if (a == INT64_MIN && b == -1) return bad(ev, "%lld // -1 overflows 64 bits", (long long)a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    *out = q;
    return 1;
}

static int expr(evaluator *ev, int level, int64_t *out);

static int atom(evaluator *ev, int64_t *out) {
    skip(ev);
    if (accept(ev, "(")) {
        if (!expr(ev, 0, out)) return 0;
        if (!accept(ev, ")")) return bad(ev, "expected ')'");
        return 1;
    }
    if (isdigit((unsigned char)*ev->p)) {
        int64_t v = 0;
        while (isdigit((unsigned char)*ev->p)) {
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *ev->p - '0', &v))
                return bad(ev, "a constant overflows 64 bits");
            ev->p++;
        }
        *out = v;
        return 1;
    }
    if (!isalpha((unsigned char)*ev->p) && *ev->p != '_') {
        if (!*ev->p) return bad(ev, "unexpected end");
        return bad(ev, "unexpected '%c'", *ev->p);
    }
    const char *start = ev->p;
    while (isalnum((unsigned char)*ev->p) || *ev->p == '_') ev->p++;
    int len = (int)(ev->p - start);
    if (accept(ev, "(")) { /* a call */
        int cdiv = len == 4 && !strncmp(start, "cdiv", 4);
        int is_max = (len == 3 && !strncmp(start, "max", 3)) || (len == 7 && !strncmp(start, "maximum", 7));
        int is_min = (len == 3 && !strncmp(start, "min", 3)) || (len == 7 && !strncmp(start, "minimum", 7));
        if (!cdiv && !is_max && !is_min) return bad(ev, "'%.*s' is not allowed", len, start);
        int64_t args[16];
        int n = 0;
        if (!accept(ev, ")")) {
            do {
                if (n == 16) return bad(ev, "too many arguments");
                if (!expr(ev, 0, &args[n++])) return 0;
            } while (accept(ev, ","));
            if (!accept(ev, ")")) return bad(ev, "expected ')'");
        }
        if (cdiv) {
            if (n != 2) return bad(ev, "cdiv takes 2 arguments");
            int64_t q;
            /* -(-a // b), as Python's ceil division; -a of INT64_MIN is an overflow. */
            if (args[0] == INT64_MIN) return bad(ev, "cdiv overflows 64 bits");
            if (!floordiv(ev, -args[0], args[1], &q)) return 0;
            if (q == INT64_MIN) return bad(ev, "cdiv overflows 64 bits");
            *out = -q;
            return 1;
        }
        if (n < 1) return bad(ev, "%.*s needs arguments", len, start);
        int64_t v = args[0];
        for (int i = 1; i < n; i++) v = is_max ? (args[i] > v ? args[i] : v) : (args[i] < v ? args[i] : v);
        *out = v;
        return 1;
    }
    for (int i = 0; i < ev->nvalues; i++)
        if ((int)strlen(ev->values[i].name) == len && !strncmp(ev->values[i].name, start, len)) {
            *out = ev->values[i].value;
            return 1;
        }
    char given[400] = "";
    size_t used = 0;
    for (int i = 0; i < ev->nvalues && used < sizeof given; i++)
        used += (size_t)snprintf(given + used, sizeof given - used, "%s%s", i ? ", " : "", ev->values[i].name);
    return bad(ev, "no value for '%.*s' (given: %s)", len, start, ev->nvalues ? given : "none");
}

static int unary(evaluator *ev, int64_t *out) {
    if (++ev->depth > MAX_DEPTH) return bad(ev, "nested too deeply");
    int ok;
    if (accept(ev, "-")) {
        ok = unary(ev, out);
        if (ok && *out == INT64_MIN) ok = bad(ev, "negation overflows 64 bits");
        if (ok) *out = -*out;
    } else if (accept(ev, "+")) {
        ok = unary(ev, out);
    } else {
        ok = atom(ev, out);
    }
    ev->depth--;
    return ok;
}

/* Binary operators by Python's binding strength, weakest first. */
static const char *LEVELS[][5] = {{"|"}, {"^"}, {"&"}, {"<<", ">>"}, {"+", "-"}, {"*", "//", "/", "%"}};
#define NLEVELS ((int)(sizeof LEVELS / sizeof LEVELS[0]))

static int apply(evaluator *ev, const char *op, int64_t a, int64_t b, int64_t *out) {
    switch (op[0]) {
    case '|': *out = a | b; return 1;
    case '^': *out = a ^ b; return 1;
    case '&': *out = a & b; return 1;
    case '+': return __builtin_add_overflow(a, b, out) ? bad(ev, "+ overflows 64 bits") : 1;
    case '-': return __builtin_sub_overflow(a, b, out) ? bad(ev, "- overflows 64 bits") : 1;
    case '*': return __builtin_mul_overflow(a, b, out) ? bad(ev, "* overflows 64 bits") : 1;
    case '<': case '>':
        if (b < 0 || b > 63) return bad(ev, "shift amount %lld outside 0..63", (long long)b);
        if (op[0] == '>') { *out = a >> b; return 1; } /* arithmetic: floors like Python's */
        if (b && (a > (INT64_MAX >> b) || a < (INT64_MIN >> b))) return bad(ev, "<< overflows 64 bits");
        *out = (int64_t)((uint64_t)a << b);
        return 1;
    case '%':
        if (b == 0) return bad(ev, "division by zero");
        if (b == -1) { *out = 0; return 1; }
        *out = a % b;
        if (*out != 0 && ((*out < 0) != (b < 0))) *out += b;
        return 1;
    default: /* "//" floors; "/" truncates toward zero, as the kernel language's i32 division */
        if (op[1] == '/') return floordiv(ev, a, b, out);
        if (b == 0) return bad(ev, "division by zero");
        if (a == INT64_MIN && b == -1) return bad(ev, "/ overflows 64 bits");
        *out = a / b;
        return 1;
    }
}

static int expr(evaluator *ev, int level, int64_t *out) {
    if (level == NLEVELS) return unary(ev, out);
    if (!expr(ev, level + 1, out)) return 0;
    for (;;) {
        const char *op = NULL;
        for (int i = 0; i < 5 && LEVELS[level][i]; i++)
            if (accept(ev, LEVELS[level][i])) { op = LEVELS[level][i]; break; }
        if (!op) return 1;
        int64_t rhs;
        if (!expr(ev, level + 1, &rhs)) return 0; /* left-associative */
        if (!apply(ev, op, *out, rhs, out)) return 0;
    }
}

td_status td__eval_formula(const char *text, const td_binding *values, int nvalues, int64_t *out) {
    evaluator ev = {text, text, values, nvalues, 0, TD_OK};
    if (!text || strlen(text) > MAX_FORMULA) return td__fail(TD_ERROR_PACKAGE, "bad grid formula (empty or too long)");
    if (expr(&ev, 0, out)) {
        skip(&ev);
        if (*ev.p) bad(&ev, "unexpected '%s'", ev.p);
    }
    return ev.status;
}

/* ---- requires(...) conditions -------------------------------------------------------------------- */
/* The text is what render_condition writes: every comparison and logic operation in parentheses,
 * "(A <= B)", "((A > 0) and (not (B == 1)))". Arithmetic inside a comparison may itself start with
 * '(': a parenthesis opens a condition when what follows its match is "and", "or" or ')'. */
static int condition(evaluator *ev, int *out);

static const char *matching(const char *p) {
    int depth = 0;
    for (; *p; p++) {
        if (*p == '(') depth++;
        if (*p == ')' && --depth == 0) return p;
    }
    return NULL;
}

static int word(evaluator *ev, const char *w) {
    skip(ev);
    size_t n = strlen(w);
    if (strncmp(ev->p, w, n) || isalnum((unsigned char)ev->p[n]) || ev->p[n] == '_') return 0;
    ev->p += n;
    return 1;
}

static int comparison(evaluator *ev, int *out) {
    static const char *ops[] = {"<=", ">=", "==", "!=", "<", ">"};
    int64_t a, b;
    if (!expr(ev, 0, &a)) return 0;
    const char *op = NULL;
    skip(ev);
    for (int i = 0; i < 6 && !op; i++)
        if (!strncmp(ev->p, ops[i], strlen(ops[i]))) op = ops[i];
    if (!op) return bad(ev, "expected a comparison");
    ev->p += strlen(op);
    if (!expr(ev, 0, &b)) return 0;
    *out = op[0] == '<' ? (op[1] ? a <= b : a < b) : op[0] == '>' ? (op[1] ? a >= b : a > b)
         : op[0] == '=' ? a == b : a != b;
    return 1;
}

static int primary(evaluator *ev, int *out) {
    if (++ev->depth > MAX_DEPTH) return bad(ev, "nested too deeply");
    int ok;
    skip(ev);
    if (word(ev, "not")) {
        ok = primary(ev, out);
        if (ok) *out = !*out;
    } else if (*ev->p == '(') {
        const char *close = matching(ev->p);
        if (!close) return bad(ev, "unbalanced parentheses");
        const char *after = close + 1;
        while (*after == ' ') after++;
        int is_condition = !*after || *after == ')' || !strncmp(after, "and", 3) || !strncmp(after, "or", 2);
        if (is_condition) {
            ev->p++;
            ok = condition(ev, out);
            if (ok && !accept(ev, ")")) ok = bad(ev, "expected ')'");
        } else {
            ok = comparison(ev, out);
        }
    } else {
        ok = comparison(ev, out);
    }
    ev->depth--;
    return ok;
}

static int conjunction(evaluator *ev, int *out) {
    if (!primary(ev, out)) return 0;
    while (word(ev, "and")) {
        int rhs;
        if (!primary(ev, &rhs)) return 0;
        *out = *out && rhs;
    }
    return 1;
}

static int condition(evaluator *ev, int *out) {
    if (!conjunction(ev, out)) return 0;
    while (word(ev, "or")) {
        int rhs;
        if (!conjunction(ev, &rhs)) return 0;
        *out = *out || rhs;
    }
    return 1;
}

td_status td__eval_condition(const char *text, const td_binding *values, int nvalues, int *out) {
    evaluator ev = {text, text, values, nvalues, 0, TD_OK};
    if (!text || strlen(text) > MAX_FORMULA) return td__fail(TD_ERROR_PACKAGE, "bad condition (empty or too long)");
    if (condition(&ev, out)) {
        skip(&ev);
        if (*ev.p) bad(&ev, "unexpected '%s'", ev.p);
    }
    return ev.status;
}
