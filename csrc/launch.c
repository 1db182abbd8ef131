/* Launching one kernel: check the named arguments against the manifest, pack the kernel
 * arguments, evaluate the grid, hipModuleLaunchKernel. The checks and the packing mirror
 * tiledsl/launcher.py (`prepare`, `PreparedLaunch.kernargs`), and so do the messages: each names
 * the argument, what was expected and what was given. Nothing is launched unless all pass. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define I32_MAX 2147483647LL
#define BUFFER_REACH 2147483648ULL /* bytes a buffer descriptor's 32-bit offsets reach */
#define MAX_GRID_YZ 65535
#define MAX_BLOCK_ITEMS 1024
#define MAX_GRID_ITEMS_X 4294967295ULL

typedef struct { const char *name; int64_t size; const char *tensor; int axis; } symbol;

typedef struct {
    const td_kernel *k;
    const td_arg **given;   /* per parameter */
    const char **sources;   /* per parameter: where a plan took it from, or NULL */
    symbol *symbols;
    int nsymbols;
    int64_t (*strides)[TD_MAX_DIMS]; /* per tensor, in elements */
} checker;

/* "'q'" or, for a plan's argument, "'o' (input 'out')": how messages name a parameter. */
static const char *label(const checker *c, int p, char *buf, size_t size) {
    if (c->sources && c->sources[p]) snprintf(buf, size, "'%s' (%s)", c->k->params[p], c->sources[p]);
    else snprintf(buf, size, "'%s'", c->k->params[p]);
    return buf;
}

static const char *kind_text(const td_arg *a, char *buf, size_t size) {
    switch (a->kind) {
    case TD_ARG_TENSOR:
        snprintf(buf, size, "a tensor of %s with %d dims", td__dtype_name(a->tensor.dtype), a->tensor.ndim);
        break;
    case TD_ARG_I32: snprintf(buf, size, "the i32 %d", (int)a->i32); break;
    case TD_ARG_F32: snprintf(buf, size, "the f32 %g", (double)a->f32); break;
    default: snprintf(buf, size, "an argument of unknown kind %d", (int)a->kind);
    }
    return buf;
}

const char *td__ints_text(const int64_t *v, int n, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && i < TD_MAX_DIMS && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

static const char *shape_text(const td_tensor *t, char *buf, size_t size) {
    return td__ints_text(t->shape, t->ndim, buf, size);
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Whether two elements of a (non-empty) strided tensor share memory, as tiledsl.launcher's
 * elements_overlap: dims sorted by stride must each step past everything the smaller ones reach;
 * a tensor that fails that test (interleaved dims) has its offsets enumerated, and one with too
 * many to enumerate is taken to overlap. */
static int elements_overlap(const td_tensor *t) {
    int64_t size[TD_MAX_DIMS], stride[TD_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) return 0;
        if (t->shape[d] < 2) continue;
        int at = n++;
        while (at > 0 && stride[at - 1] > t->strides[d]) { stride[at] = stride[at - 1]; size[at] = size[at - 1]; at--; }
        stride[at] = t->strides[d];
        size[at] = t->shape[d];
    }
    int64_t reach = 0, count = 1;
    int apart = 1;
    for (int d = 0; d < n && apart; d++) {
        if (stride[d] <= reach) apart = 0;
        else reach += (size[d] - 1) * stride[d];
    }
    if (apart) return 0;
    for (int d = 0; d < n; d++)
        if ((count *= size[d]) > (1 << 20)) return 1;
    int64_t *offsets = malloc((size_t)count * sizeof *offsets);
    if (!offsets) return 1;
    int64_t filled = 1;
    offsets[0] = 0;
    for (int d = 0; d < n; d++) {
        for (int64_t k = size[d] - 1; k >= 0; k--)
            for (int64_t j = 0; j < filled; j++) offsets[k * filled + j] = offsets[j] + k * stride[d];
        filled *= size[d];
    }
    qsort(offsets, (size_t)filled, sizeof *offsets, by_value);
    int overlap = 0;
    for (int64_t j = 1; j < filled && !overlap; j++) overlap = offsets[j] == offsets[j - 1];
    free(offsets);
    return overlap;
}

static const char *dims_text(const td_tensor_spec *spec, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < spec->ndim && used < size; i++) {
        if (spec->sym[i]) used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", spec->sym[i]);
        else used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)spec->dims[i]);
    }
    return buf;
}

#define FAIL(...) td__fail(TD_ERROR_ARGUMENT, __VA_ARGS__)

static td_status check_tensor(checker *c, int p) {
    const td_kernel *k = c->k;
    int ti = k->param_tensor[p];
    const td_tensor_spec *spec = &k->tensors[ti];
    const td_arg *a = c->given[p];
    const td_tensor *t = &a->tensor;
    char name[320], what[160], shape[200];
    label(c, p, name, sizeof name);
    if (a->kind != TD_ARG_TENSOR)
        return FAIL("argument %s: expected a tensor of %s with %d dims (%s), got %s", name, td__dtype_name(spec->dtype),
                    spec->ndim, dims_text(spec, shape, sizeof shape), kind_text(a, what, sizeof what));
    if (t->dtype != spec->dtype)
        return FAIL("argument %s: expected dtype %s, got %s", name, td__dtype_name(spec->dtype),
                    td__dtype_name(t->dtype));
    if (t->ndim < 1 || t->ndim > TD_MAX_DIMS)
        return FAIL("argument %s: ndim %d outside 1..%d", name, t->ndim, TD_MAX_DIMS);
    if (t->ndim != spec->ndim)
        return FAIL("argument %s: expected %d dims (%s), got shape %s", name, spec->ndim,
                    dims_text(spec, what, sizeof what), shape_text(t, shape, sizeof shape));
    shape_text(t, shape, sizeof shape);
    for (int axis = 0; axis < t->ndim; axis++) {
        int64_t size = t->shape[axis];
        if (size < 0) return FAIL("argument %s: dim %d is negative (shape %s)", name, axis, shape);
        if (size > I32_MAX) return FAIL("argument %s: dim %d = %lld does not fit in i32", name, axis, (long long)size);
        if (!spec->sym[axis]) {
            if (size != spec->dims[axis])
                return FAIL("argument %s: dim %d must be %lld, got %lld (shape %s)", name, axis,
                            (long long)spec->dims[axis], (long long)size, shape);
            continue;
        }
        symbol *found = NULL;
        for (int i = 0; i < c->nsymbols; i++)
            if (!strcmp(c->symbols[i].name, spec->sym[axis])) found = &c->symbols[i];
        if (!found) {
            c->symbols[c->nsymbols++] = (symbol){spec->sym[axis], size, spec->name, axis};
        } else if (found->size != size) {
            return FAIL("argument %s: dim %d is %s = %lld, but %s = %lld from %s.shape[%d]", name, axis, found->name,
                        (long long)size, found->name, (long long)found->size, found->tensor, found->axis);
        }
    }
    int n = t->ndim, empty = 0;
    for (int axis = 0; axis < n; axis++) empty |= t->shape[axis] == 0;
    if (empty) { /* nothing is read or written: any strides and pointer (numpy's 0, torch's NULL), as launcher.py */
        memset(c->strides[ti], 0, sizeof c->strides[ti]);
        return TD_OK;
    }
    if (!t->data) return FAIL("argument %s: data is NULL", name);
    for (int axis = 0; axis < n; axis++)
        if (t->strides[axis] < 0)
            return FAIL("argument %s: stride %lld on dim %d is negative", name, (long long)t->strides[axis], axis);
    if (spec->written && elements_overlap(t)) {
        char strides[160];
        return FAIL("argument %s: the kernel writes it, but its elements overlap in memory (shape %s, strides %s "
                    "elements); pass a tensor whose elements are distinct", name, shape,
                    td__ints_text(t->strides, t->ndim, strides, sizeof strides));
    }
    if (spec->unit_last_stride && t->shape[n - 1] > 1 && t->strides[n - 1] != 1)
        return FAIL("argument %s: the kernel was compiled for a contiguous last dim (stride 1, the default), got "
                    "stride %lld", name, (long long)t->strides[n - 1]);
    int passed = spec->unit_last_stride ? n - 1 : n;
    for (int axis = 0; axis < passed; axis++) {
        if (t->shape[axis] > 1 && t->strides[axis] % spec->stride_unit)
            return FAIL("argument %s: stride %lld on dim %d is not a multiple of %lld elements, which this kernel "
                        "variant assumes (compile it with stride_unit=1)", name, (long long)t->strides[axis], axis,
                        (long long)spec->stride_unit);
        if (t->strides[axis] / spec->stride_unit > I32_MAX)
            return FAIL("argument %s: stride %lld on dim %d does not fit in i32", name, (long long)t->strides[axis],
                        axis);
    }
    /* The element offsets the kernel computes are i32: the last element must be reachable. */
    int64_t last = 0, term;
    for (int axis = 0; axis < n; axis++) {
        if (__builtin_mul_overflow(t->shape[axis] - 1, t->strides[axis], &term) ||
            __builtin_add_overflow(last, term, &last) || last > I32_MAX)
            return FAIL("argument %s: spans more than 2^31 elements; offsets must fit in i32", name);
    }
    /* Buffer instructions' byte offsets are 32-bit with masked-off lanes at 2 GiB (the manifest's "buffer"). */
    size_t item = td_dtype_size(spec->dtype);
    if (spec->buffer && (uint64_t)(last + 1) * item > BUFFER_REACH)
        return FAIL("argument %s: spans %llu bytes; this kernel variant addresses it with buffer instructions, which "
                    "reach %llu bytes (2 GiB): compile it with CompileOptions(large_tensors=(%s,))", name,
                    (unsigned long long)((uint64_t)(last + 1) * item), (unsigned long long)BUFFER_REACH, name);
    /* Dims whose rows a buffer descriptor bounds (the manifest's "row_bounds", CompileOptions.disjoint_rows):
       each needs its stride above the last dim's span, so that rows do not overlap. A size-1 dim's one row is at
       index 0 whatever its stride (x[None] has stride 0): it is passed one that suits. */
    memcpy(c->strides[ti], t->strides, sizeof t->strides);
    int64_t last_stride = spec->unit_last_stride ? 1 : t->strides[n - 1], span = (t->shape[n - 1] - 1) * last_stride;
    for (int axis = 0; axis < n; axis++) {
        if (!(spec->row_bounds >> axis & 1)) continue;
        int64_t s = axis == n - 1 ? last_stride : t->strides[axis];
        if (s > 0 && (axis == n - 1 || s > span)) continue;
        if (t->shape[axis] == 1) {
            c->strides[ti][axis] = (span / spec->stride_unit + 1) * spec->stride_unit;
            continue;
        }
        return FAIL("argument %s: this kernel variant bounds its dim %d with a buffer descriptor, which needs that "
                    "dim's stride (%lld elements) above the last dim's span (%lld), so that rows do not overlap: "
                    "compile it with --overlapping-rows (CompileOptions(disjoint_rows=False))", name, axis,
                    (long long)s, (long long)span);
    }
    return TD_OK;
}

static td_status check_scalar(checker *c, int p) {
    const td_arg *a = c->given[p];
    char name[320], what[160];
    label(c, p, name, sizeof name);
    if (c->k->param_f32[p] ? (a->kind != TD_ARG_F32 && a->kind != TD_ARG_I32) : a->kind != TD_ARG_I32)
        return FAIL("argument %s: expected an %s number, got %s", name, c->k->param_f32[p] ? "f32" : "i32",
                    kind_text(a, what, sizeof what));
    return TD_OK;
}

/* Match the arguments to the parameters by name: each once, none unknown, none missing. */
static td_status match(checker *c, const td_arg *args, int nargs, const char *const *sources) {
    const td_kernel *k = c->k;
    for (int i = 0; i < nargs; i++) {
        if (!args[i].name) return FAIL("argument %d has no name", i);
        int p = 0;
        while (p < k->nparams && strcmp(k->params[p], args[i].name)) p++;
        if (p == k->nparams) {
            char list[1024];
            size_t used = 0;
            list[0] = 0;
            for (int q = 0; q < k->nparams && used < sizeof list; q++)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", q ? ", " : "", k->params[q]);
            return FAIL("no argument '%s'; the arguments are %s", args[i].name, list);
        }
        if (c->given[p]) return FAIL("argument '%s' given twice", args[i].name);
        c->given[p] = &args[i];
        c->sources[p] = sources ? sources[i] : NULL;
    }
    char missing[1024];
    size_t used = 0;
    for (int p = 0; p < k->nparams && used < sizeof missing; p++)
        if (!c->given[p]) used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%s", used ? ", " : "",
                                                   k->params[p]);
    if (used) return td__fail(TD_ERROR_NOT_FOUND, "missing argument(s) %s", missing);
    return TD_OK;
}

static td_status grid_of(checker *c, const td_arg *const *given, unsigned grid[3]) {
    const td_kernel *k = c->k;
    /* Constexprs first: the first binding of a name wins, and Python's launcher lets them override. */
    int n = 0, cap = k->nconstexprs + k->nparams + c->nsymbols;
    td_binding *values = calloc((size_t)cap + 1, sizeof *values);
    if (!values) return td__fail(TD_ERROR_MEMORY, "out of memory");
    for (int i = 0; i < k->nconstexprs; i++) values[n++] = k->constexprs[i];
    for (int p = 0; p < k->nparams; p++)
        if (k->param_tensor[p] < 0 && given[p]->kind == TD_ARG_I32)
            values[n++] = (td_binding){k->params[p], given[p]->i32};
    for (int i = 0; i < c->nsymbols; i++) values[n++] = (td_binding){c->symbols[i].name, c->symbols[i].size};
    td_status s = TD_OK;
    for (int r = 0; r < k->nrequires && s == TD_OK; r++) { /* requires(...): checked like the grid */
        int holds = 0;
        s = td__eval_condition(k->requires[r], values, n, &holds);
        if (s == TD_OK && !holds) {
            char given[512] = "";
            size_t used = 0;
            for (int i = 0; i < n && used < sizeof given; i++)
                if (strstr(k->requires[r], values[i].name))
                    used += (size_t)snprintf(given + used, sizeof given - used, "%s%s = %lld", used ? ", " : "",
                                             values[i].name, (long long)values[i].value);
            s = FAIL("%s() requires %s, but %s", k->name, k->requires[r], given);
        }
    }
    for (int d = 0; d < 3 && s == TD_OK; d++) {
        int64_t v = 0;
        s = td__eval_formula(k->grid[d], values, n, &v);
        if (s == TD_OK && (v < 0 || v > (int64_t)MAX_GRID_ITEMS_X))
            s = FAIL("grid dimension '%s' evaluates to %lld, outside 0..%llu", k->grid[d], (long long)v,
                     MAX_GRID_ITEMS_X);
        grid[d] = (unsigned)v;
    }
    free(values);
    return s;
}

td_status td__prepare_launch(const td_kernel *k, const td_arg *args, int nargs, const char *const *sources,
                             td_launch *out) {
    memset(out, 0, sizeof *out);
    if (nargs < 0 || (nargs && !args)) return FAIL("%d arguments at %p", nargs, (const void *)args);
    checker c = {k, calloc((size_t)k->nparams + 1, sizeof(td_arg *)), calloc((size_t)k->nparams + 1, sizeof(char *)),
                 calloc((size_t)k->ntensors * TD_MAX_DIMS + 1, sizeof(symbol)), 0,
                 calloc((size_t)k->ntensors + 1, sizeof *c.strides)};
    td_status s = TD_OK;
    if (!c.given || !c.sources || !c.symbols || !c.strides) s = td__fail(TD_ERROR_MEMORY, "out of memory");
    if (s == TD_OK) s = match(&c, args, nargs, sources);
    for (int p = 0; s == TD_OK && p < k->nparams; p++)
        s = k->param_tensor[p] >= 0 ? check_tensor(&c, p) : check_scalar(&c, p);
    for (int i = 0; s == TD_OK && i < k->ndim_units; i++) {
        for (int j = 0; j < c.nsymbols; j++) {
            const symbol *sym = &c.symbols[j];
            if (!strcmp(sym->name, k->dim_units[i].name) && sym->size % k->dim_units[i].value)
                s = FAIL("argument '%s': %s.shape[%d] is %s = %lld, which this kernel variant assumes is a multiple of "
                         "%lld (compile it without dim_units for %s)", sym->tensor, sym->tensor, sym->axis, sym->name,
                         (long long)sym->size, (long long)k->dim_units[i].value, sym->name);
        }
    }
    if (s == TD_OK) s = grid_of(&c, c.given, out->grid);
    unsigned g0 = out->grid[0], g1 = out->grid[1], g2 = out->grid[2];
    const unsigned *b = k->block;
    if (s == TD_OK && g0 && g1 && g2) { /* an empty grid launches nothing: no limits apply */
        if (g1 > MAX_GRID_YZ || g2 > MAX_GRID_YZ)
            s = FAIL("grid (%u, %u, %u) has more than %d workgroups in y or z, which HIP cannot launch (grid [%s, %s, "
                     "%s] for these arguments)", g0, g1, g2, MAX_GRID_YZ, k->grid[0], k->grid[1], k->grid[2]);
        else if ((unsigned long long)b[0] * b[1] * b[2] > MAX_BLOCK_ITEMS)
            s = FAIL("block (%u, %u, %u) has more than %d work-items", b[0], b[1], b[2], MAX_BLOCK_ITEMS);
        else if ((unsigned long long)g0 * b[0] > MAX_GRID_ITEMS_X)
            s = FAIL("grid (%u, %u, %u) of block (%u, %u, %u) has more than 2**32 - 1 work-items along x", g0, g1, g2,
                     b[0], b[1], b[2]);
    }
    if (s == TD_OK && !(out->kernargs = calloc(k->kernarg_size + 1, 1))) s = td__fail(TD_ERROR_MEMORY, "out of memory");
    for (int i = 0; s == TD_OK && i < k->nkernargs; i++) {
        const td_kernarg *ka = &k->kernargs[i];
        unsigned char *at = out->kernargs + ka->offset;
        if (ka->kind == KA_POINTER) {
            uint64_t address = (uint64_t)(uintptr_t)c.given[ka->param]->tensor.data;
            memcpy(at, &address, 8);
        } else if (ka->kind == KA_STRIDE) {
            int32_t v = (int32_t)(c.strides[ka->tensor][ka->dim] / k->tensors[ka->tensor].stride_unit);
            memcpy(at, &v, 4);
        } else if (ka->kind == KA_SHAPE) {
            const symbol *sym = NULL;
            for (int j = 0; j < c.nsymbols; j++)
                if (!strcmp(c.symbols[j].name, ka->name)) sym = &c.symbols[j];
            if (!sym) {
                s = td__fail(TD_ERROR_PACKAGE, "manifest of %s: shape symbol %s is no tensor's dim", k->name, ka->name);
                break;
            }
            int64_t unit = 1;
            for (int j = 0; j < k->ndim_units; j++)
                if (!strcmp(k->dim_units[j].name, ka->name)) unit = k->dim_units[j].value;
            int32_t v = (int32_t)(sym->size / unit);
            memcpy(at, &v, 4);
        } else {
            const td_arg *a = c.given[ka->param];
            if (ka->f32) {
                float v = a->kind == TD_ARG_F32 ? a->f32 : (float)a->i32;
                memcpy(at, &v, 4);
            } else {
                memcpy(at, &a->i32, 4);
            }
        }
    }
    out->size = k->kernarg_size;
    if (s != TD_OK) {
        free(out->kernargs);
        out->kernargs = NULL;
    }
    free(c.given);
    free(c.sources);
    free(c.symbols);
    free(c.strides);
    return s;
}

td_status td__launch(const td_kernel *k, const td_launch *launch, void *stream) {
    if (!launch->grid[0] || !launch->grid[1] || !launch->grid[2]) return TD_OK;
    td_status s = td__set_device(k->device);
    if (s != TD_OK) return s;
    /* The arguments go as one buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER/SIZE/END = 1/2/3, in this
     * order); HIP copies it when the launch is enqueued, so it may be freed on return. */
    size_t size = launch->size;
    void *extra[] = {(void *)1, launch->kernargs, (void *)2, &size, (void *)3};
    char what[300];
    snprintf(what, sizeof what, "hipModuleLaunchKernel(%s)", k->name);
    return td__hip_check(td__hip.ModuleLaunchKernel(k->function, launch->grid[0], launch->grid[1], launch->grid[2],
                                                    k->block[0], k->block[1], k->block[2], 0, stream, NULL, extra),
                         what);
}

td_status td_kernel_launch(td_kernel *k, const td_arg *args, int nargs, void *stream) {
    td_status s = td__need_init();
    if (s != TD_OK) return s;
    if (!k) return FAIL("td_kernel_launch: kernel is NULL");
    td_launch launch;
    s = td__prepare_launch(k, args, nargs, NULL, &launch);
    if (s == TD_OK) s = td__launch(k, &launch, stream);
    free(launch.kernargs);
    return s == TD_OK ? s : td__context(s, "%s", k->name);
}
