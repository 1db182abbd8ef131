/* Plans: the stages of one multi-stage call over one workspace, as tiledsl.plan.Plan.to_json
 * writes them. td_plan_run mirrors Plan.run: the workspace's regions (and ws_i/ws_f, the whole
 * workspace as words) join the call's arguments, each stage binds its parameters by name, the
 * host segment is copied in and the zeroed regions cleared, the stages launch in order. Unlike
 * Plan.run, every stage's arguments are checked before the first launch. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { PA_REF, PA_I32, PA_F32, PA_ZEROS };

typedef struct {
    const char *param;
    int kind;        /* PA_* */
    const char *ref; /* PA_REF: the input or workspace name */
    int32_t i32;
    float f32;
    td_tensor zeros; /* PA_ZEROS: a read-only stand-in, allocated at load */
} plan_arg;

typedef struct {
    const char *name;
    td_kernel *kernel;
    plan_arg *args;
    int nargs;
} plan_stage;

typedef struct {
    const char *name;
    td_dtype dtype;
    int64_t offset, words; /* in 4-byte words */
    int ndim;
    int64_t shape[TD_MAX_DIMS];
    int zero;
} plan_region;

struct td_plan {
    js_doc *doc; /* owns the names */
    const char *op;
    int device;
    plan_stage *stages;
    int nstages;
    plan_region *regions;
    int nregions;
    size_t ws_size;
    unsigned char *host;
    size_t host_size;
    void **standins; /* device memory of the PA_ZEROS arguments */
    int nstandins;
    const js_value *shapes; /* the inputs' shapes the plan was made for, by name (NULL: none recorded) */
    const js_value *values; /* the i32 inputs whose values it was made for (group mode's cu_seqlens) */
    const js_value *offsets; /* group mode's offset inputs: name -> {"rows": [input, dim], "longest": input} */
};

#define BAD(...) td__fail(TD_ERROR_PACKAGE, __VA_ARGS__)

static const char *str_of(const js_value *obj, const char *key) {
    const js_value *v = js_get(obj, key);
    return v && v->type == JS_STRING ? v->s : NULL;
}

static int int_of(const js_value *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const js_value *v = js_get(obj, key);
    if (!v || !v->is_int || v->i < lo || v->i > hi) return 0;
    *out = v->i;
    return 1;
}

/* A list of at most TD_MAX_DIMS non-negative integers. */
static int dims_of(const js_value *list, int64_t out[TD_MAX_DIMS], int *n) {
    if (!list || list->type != JS_ARRAY || list->n > TD_MAX_DIMS) return 0;
    for (size_t i = 0; i < list->n; i++) {
        if (!list->items[i]->is_int || list->items[i]->i < 0 || list->items[i]->i > 2147483647LL) return 0;
        out[i] = list->items[i]->i;
    }
    *n = (int)list->n;
    return 1;
}

void td_plan_free(td_plan *plan) {
    if (!plan) return;
    if (plan->nstandins && td__hip.SetDevice) td__hip.SetDevice(plan->device);
    for (int i = 0; i < plan->nstandins; i++) td__hip.Free(plan->standins[i]);
    for (int i = 0; i < plan->nstages; i++) free(plan->stages[i].args);
    free(plan->stages);
    free(plan->regions);
    free(plan->host);
    free(plan->standins);
    js_free(plan->doc);
    free(plan);
}

static td_status load_workspace(td_plan *plan, const js_value *ws) {
    int64_t size;
    const char *host = str_of(ws, "host");
    const js_value *regions = js_get(ws, "regions");
    if (!int_of(ws, "size", 0, INT64_MAX / 2, &size) || !host || !regions || regions->type != JS_ARRAY)
        return BAD("'workspace' needs a size, a host string and a regions list");
    plan->ws_size = (size_t)size;
    size_t len = strlen(host);
    if (len % 2 || len / 2 > plan->ws_size) return BAD("workspace: the host segment is not hex bytes within the size");
    plan->host_size = len / 2;
    plan->host = malloc(plan->host_size + 1);
    plan->regions = calloc(regions->n + 1, sizeof *plan->regions);
    if (!plan->host || !plan->regions) return td__fail(TD_ERROR_MEMORY, "out of memory");
    for (size_t i = 0; i < plan->host_size; i++) {
        int hi = td__hex_digit((unsigned char)host[2 * i]), lo = td__hex_digit((unsigned char)host[2 * i + 1]);
        if (hi < 0 || lo < 0) return BAD("workspace: the host segment is not hex");
        plan->host[i] = (unsigned char)(hi * 16 + lo);
    }
    for (size_t i = 0; i < regions->n; i++) {
        const js_value *r = regions->items[i], *zero = js_get(r, "zero");
        plan_region *pr = &plan->regions[plan->nregions++];
        pr->name = str_of(r, "name");
        pr->dtype = td__dtype_from_name(str_of(r, "dtype"));
        size_t item = td_dtype_size(pr->dtype);
        if (!pr->name || !item || !int_of(r, "offset", 0, size / 4, &pr->offset) ||
            !int_of(r, "words", 0, size / 4 - pr->offset, &pr->words) ||
            !dims_of(js_get(r, "shape"), pr->shape, &pr->ndim))
            return BAD("workspace region %zu: needs a name, a known dtype, an offset and words within the workspace, "
                       "and a shape", i);
        if (zero && zero->type != JS_BOOL)
            return BAD("workspace region '%s': 'zero' is %s, not a bool", pr->name, js_type_name(zero->type));
        pr->zero = zero && zero->boolean;
        for (int j = 0; j + 1 < plan->nregions; j++) {
            const plan_region *other = &plan->regions[j];
            if (!strcmp(other->name, pr->name)) return BAD("workspace: two regions named '%s'", pr->name);
            if (pr->words && other->words && pr->offset < other->offset + other->words &&
                other->offset < pr->offset + pr->words)
                return BAD("workspace regions '%s' and '%s' overlap (words %lld..%lld and %lld..%lld)", other->name,
                           pr->name, (long long)other->offset, (long long)(other->offset + other->words),
                           (long long)pr->offset, (long long)(pr->offset + pr->words));
        }
        uint64_t bytes = item;
        int overflow = 0;
        for (int d = 0; d < pr->ndim; d++) overflow |= __builtin_mul_overflow(bytes, (uint64_t)pr->shape[d], &bytes);
        if ((4 * pr->offset) % (int64_t)item || overflow || bytes > (uint64_t)pr->words * 4)
            return BAD("workspace region '%s': its %s shape does not fit its %lld words", pr->name,
                       td__dtype_name(pr->dtype), (long long)pr->words);
    }
    return TD_OK;
}

/* One stage argument from the JSON; a zero stand-in gets its device memory now. */
static td_status load_arg(td_plan *plan, const js_value *a, plan_arg *out) {
    const js_value *value = js_get(a, "value"), *zeros = js_get(a, "zeros");
    out->param = str_of(a, "param");
    out->ref = str_of(a, "ref");
    if (!out->param) return BAD("an argument without a 'param' name");
    if ((out->ref != NULL) + (value != NULL) + (zeros != NULL) != 1)
        return BAD("parameter '%s': expected exactly one of 'ref', 'value' and 'zeros'", out->param);
    if (out->ref) {
        out->kind = PA_REF;
    } else if (value) {
        const char *dtype = str_of(a, "dtype");
        int f32 = dtype ? !strcmp(dtype, "f32") : !value->is_int;
        if (value->type != JS_NUMBER || (dtype && strcmp(dtype, "f32") && strcmp(dtype, "i32")))
            return BAD("parameter '%s': the value must be a number with dtype i32 or f32", out->param);
        if (!f32 && (!value->is_int || value->i < INT32_MIN || value->i > INT32_MAX))
            return BAD("parameter '%s': the value %g is not an i32", out->param, value->d);
        out->kind = f32 ? PA_F32 : PA_I32;
        out->i32 = f32 ? 0 : (int32_t)value->i;
        out->f32 = (float)value->d;
    } else {
        td_tensor *t = &out->zeros;
        int nstrides = 0;
        t->dtype = td__dtype_from_name(str_of(zeros, "dtype"));
        if (!t->dtype || !dims_of(js_get(zeros, "shape"), t->shape, &t->ndim) || t->ndim < 1 ||
            !dims_of(js_get(zeros, "strides"), t->strides, &nstrides) || nstrides != t->ndim)
            return BAD("parameter '%s': 'zeros' needs a known dtype, and a shape and strides of 1 to %d dims",
                       out->param, TD_MAX_DIMS);
        uint64_t last = 0;
        for (int d = 0; d < t->ndim; d++)
            last += t->shape[d] ? (uint64_t)(t->shape[d] - 1) * (uint64_t)t->strides[d] : 0;
        size_t bytes = (size_t)(last + 1) * td_dtype_size(t->dtype);
        bytes = bytes < 16 ? 16 : bytes; /* never 0 bytes: masked lanes may still read element 0 */
        out->kind = PA_ZEROS;
        char what[256];
        snprintf(what, sizeof what, "hipMalloc(%zu) for the zero stand-in '%s'", bytes, out->param);
        td_status s = td__set_device(plan->device);
        if (s == TD_OK) s = td__hip_check(td__hip.Malloc(&t->data, bytes), what);
        if (s != TD_OK) return s;
        plan->standins[plan->nstandins++] = t->data;
        snprintf(what, sizeof what, "hipMemset of the zero stand-in '%s'", out->param);
        return td__hip_check(td__hip.Memset(t->data, 0, bytes), what);
    }
    return TD_OK;
}

static td_status load_stage(td_plan *plan, td_package *package, const js_value *st, plan_stage *out) {
    const js_value *args = js_get(st, "args");
    const char *key = str_of(st, "kernel"), *kernel_name = str_of(st, "kernel_name");
    out->name = str_of(st, "name");
    if (!out->name || !key || !args || args->type != JS_ARRAY)
        return BAD("a stage needs a name, a kernel key and args");
    td_status s = td_kernel_get(package, key, plan->device, &out->kernel);
    if (s != TD_OK) return td__context(s, "stage %s", out->name);
    const td_kernel *k = out->kernel;
    if (kernel_name && strcmp(kernel_name, k->name))
        return BAD("stage %s: the plan names kernel %s, but key %.12s is %s", out->name, kernel_name, key, k->name);
    out->args = calloc(args->n + 1, sizeof *out->args);
    if (!out->args) return td__fail(TD_ERROR_MEMORY, "out of memory");
    for (size_t i = 0; i < args->n; i++) {
        plan_arg *a = &out->args[out->nargs++];
        if ((s = load_arg(plan, args->items[i], a)) != TD_OK) return td__context(s, "stage %s", out->name);
        int p = 0;
        while (p < k->nparams && strcmp(k->params[p], a->param)) p++;
        if (p == k->nparams) return BAD("stage %s: kernel %s has no parameter '%s'", out->name, k->name, a->param);
        for (int j = 0; j < out->nargs - 1; j++)
            if (!strcmp(out->args[j].param, a->param))
                return BAD("stage %s: parameter '%s' bound twice", out->name, a->param);
    }
    for (int p = 0; p < k->nparams; p++) {
        int bound = 0;
        for (int j = 0; j < out->nargs; j++) bound |= !strcmp(out->args[j].param, k->params[p]);
        if (!bound)
            return BAD("stage %s: the plan binds no value to parameter '%s' of %s", out->name, k->params[p], k->name);
    }
    return TD_OK;
}

static td_status load(td_plan *plan, td_package *package, const js_value *root) {
    const char *format = str_of(root, "format");
    const js_value *stages = js_get(root, "stages"), *ws = js_get(root, "workspace");
    int64_t version;
    if (!format || strcmp(format, "tiledsl-plan") || !int_of(root, "version", 1, 1, &version))
        return BAD("not a tiledsl plan of format version 1 (write one with `tiledsl plan ... --json` or Plan.to_json)");
    plan->op = str_of(root, "op");
    if (!plan->op || !stages || stages->type != JS_ARRAY || !ws || ws->type != JS_OBJECT)
        return BAD("a plan needs 'op', 'stages' and 'workspace'");
    td_status s = load_workspace(plan, ws);
    if (s != TD_OK) return s;
    plan->shapes = js_get(root, "shapes");
    if (plan->shapes && plan->shapes->type != JS_OBJECT) return BAD("'shapes' is not an object of input shapes");
    for (size_t i = 0; plan->shapes && i < plan->shapes->n; i++) {
        const js_value *dims = plan->shapes->items[i];
        int ok = dims->type == JS_ARRAY && dims->n <= TD_MAX_DIMS;
        for (size_t d = 0; ok && d < dims->n; d++) ok = dims->items[d]->is_int && dims->items[d]->i >= 0;
        if (!ok) return BAD("shapes: '%s' is not a list of at most %d sizes", plan->shapes->keys[i], TD_MAX_DIMS);
    }
    plan->values = js_get(root, "values");
    if (plan->values && plan->values->type != JS_OBJECT) return BAD("'values' is not an object of input values");
    for (size_t i = 0; plan->values && i < plan->values->n; i++) {
        const js_value *list = plan->values->items[i];
        int ok = list->type == JS_ARRAY && list->n > 0;
        for (size_t j = 0; ok && j < list->n; j++)
            ok = list->items[j]->is_int && list->items[j]->i >= INT32_MIN && list->items[j]->i <= INT32_MAX;
        if (!ok) return BAD("values: '%s' is not a list of i32 values", plan->values->keys[i]);
    }
    plan->offsets = js_get(root, "offsets");
    if (plan->offsets && plan->offsets->type != JS_OBJECT) return BAD("'offsets' is not an object of offset inputs");
    for (size_t i = 0; plan->offsets && i < plan->offsets->n; i++) {
        const js_value *spec = plan->offsets->items[i], *rows = js_get(spec, "rows"), *longest = js_get(spec, "longest");
        int ok = spec->type == JS_OBJECT && rows && rows->type == JS_ARRAY && rows->n == 2 &&
                 rows->items[0]->type == JS_STRING && rows->items[1]->is_int && rows->items[1]->i >= 0 &&
                 rows->items[1]->i < TD_MAX_DIMS && (!longest || longest->type == JS_STRING);
        if (!ok) return BAD("offsets: '%s' is not {\"rows\": [input, dim], \"longest\": input}", plan->offsets->keys[i]);
    }
    size_t nargs = 0;
    for (size_t i = 0; i < stages->n; i++) {
        const js_value *args = js_get(stages->items[i], "args");
        nargs += args && args->type == JS_ARRAY ? args->n : 0;
    }
    plan->stages = calloc(stages->n + 1, sizeof *plan->stages);
    plan->standins = calloc(nargs + 1, sizeof *plan->standins);
    if (!plan->stages || !plan->standins) return td__fail(TD_ERROR_MEMORY, "out of memory");
    for (size_t i = 0; i < stages->n; i++) {
        if ((s = load_stage(plan, package, stages->items[i], &plan->stages[plan->nstages++])) != TD_OK) return s;
    }
    return TD_OK;
}

td_status td_plan_load(td_package *package, const char *plan_json, int device, td_plan **out) {
    td_status s = td__need_init();
    if (s != TD_OK) return s;
    if (!package || !plan_json || !out) return td__fail(TD_ERROR_ARGUMENT, "td_plan_load: package, plan_json and out "
                                                        "must not be NULL");
    *out = NULL;
    const char *text = plan_json, *p = plan_json;
    char *file = NULL;
    size_t size;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p != '{') { /* a path */
        if ((s = td__read_file(plan_json, "plan file", &file, &size)) != TD_OK) return td__context(s, "plan");
        text = file;
    } else {
        size = strlen(text);
    }
    char err[256];
    js_doc *doc = js_parse(text, size, err, sizeof err);
    free(file);
    if (!doc) {
        if (text != plan_json) return td__fail(TD_ERROR_PACKAGE, "plan %s: not valid JSON (%s)", plan_json, err);
        return td__fail(TD_ERROR_PACKAGE, "plan: not valid JSON (%s)", err);
    }
    td_plan *plan = calloc(1, sizeof *plan);
    if (!plan) { js_free(doc); return td__fail(TD_ERROR_MEMORY, "out of memory"); }
    plan->doc = doc;
    plan->device = device;
    s = load(plan, package, js_root(doc));
    if (s != TD_OK) {
        s = td__context(s, "plan %s", plan->op ? plan->op : (text != plan_json ? plan_json : "(text)"));
        td_plan_free(plan);
        return s;
    }
    *out = plan;
    return TD_OK;
}

size_t td_plan_workspace_size(const td_plan *plan) { return plan ? plan->ws_size : 0; }
int td_plan_num_stages(const td_plan *plan) { return plan ? plan->nstages : 0; }

const char *td_plan_stage_name(const td_plan *plan, int stage) {
    return plan && stage >= 0 && stage < plan->nstages ? plan->stages[stage].name : NULL;
}

td_status td_plan_prepare_workspace(td_plan *plan, void *workspace, void *stream) {
    (void)stream; /* hipMemcpy/hipMemset run on the null stream, which orders them with blocking streams */
    td_status s = td__need_init();
    if (s != TD_OK) return s;
    if (!plan) return td__fail(TD_ERROR_ARGUMENT, "td_plan_prepare_workspace: plan is NULL");
    if (!plan->ws_size) return TD_OK;
    if (!workspace)
        return td__fail(TD_ERROR_ARGUMENT, "workspace: the plan needs %zu bytes, got NULL", plan->ws_size);
    if ((s = td__set_device(plan->device)) != TD_OK) return s;
    if (plan->host_size) {
        s = td__hip_check(td__hip.Memcpy(workspace, plan->host, plan->host_size, TD_HIP_MEMCPY_HOST_TO_DEVICE),
                          "hipMemcpy of the workspace's host segment");
        if (s != TD_OK) return s;
    }
    for (int i = 0; i < plan->nregions; i++) {
        const plan_region *r = &plan->regions[i];
        if (!r->zero || !r->words) continue;
        char what[200];
        snprintf(what, sizeof what, "hipMemset of workspace region '%s'", r->name);
        s = td__hip_check(td__hip.Memset((char *)workspace + 4 * r->offset, 0, (size_t)(4 * r->words)), what);
        if (s != TD_OK) return s;
    }
    return TD_OK;
}

/* The workspace as named arguments: each region as a contiguous tensor, then ws_i and ws_f. */
static void workspace_views(const td_plan *plan, void *ws, td_arg *views) {
    for (int i = 0; i < plan->nregions; i++) {
        const plan_region *r = &plan->regions[i];
        char *at = (char *)ws + 4 * r->offset;
        views[i] = td_tensor_arg(r->name, td_contiguous(at, r->dtype, r->ndim, r->shape));
    }
    int64_t words = (int64_t)(plan->ws_size / 4);
    views[plan->nregions] = td_tensor_arg("ws_i", td_contiguous(ws, TD_I32, 1, &words));
    views[plan->nregions + 1] = td_tensor_arg("ws_f", td_contiguous(ws, TD_F32, 1, &words));
}

static const td_arg *lookup(const td_arg *args, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(args[i].name, name)) return &args[i];
    return NULL;
}

/* Bind one stage's parameters to the inputs, the workspace views and the plan's fixed values. */
static td_status bind(const plan_stage *st, const td_arg *args, int nargs, const td_arg *views, int nviews,
                      td_arg *bound, const char **sources, char (*notes)[96]) {
    for (int i = 0; i < st->nargs; i++) {
        const plan_arg *a = &st->args[i];
        sources[i] = NULL;
        if (a->kind == PA_REF) {
            const td_arg *v = lookup(views, nviews, a->ref);
            int from_workspace = v != NULL;
            if (v) {
                snprintf(notes[i], sizeof notes[i], "workspace '%s'", a->ref);
            } else if ((v = lookup(args, nargs, a->ref))) {
                snprintf(notes[i], sizeof notes[i], "input '%s'", a->ref);
            } else {
                return td__fail(TD_ERROR_NOT_FOUND, "no value for input '%s' (parameter %s)", a->ref, a->param);
            }
            if (from_workspace || strcmp(a->ref, a->param)) sources[i] = notes[i];
            bound[i] = *v;
        } else if (a->kind == PA_ZEROS) {
            bound[i] = td_tensor_arg(a->param, a->zeros);
            sources[i] = "the plan's zero stand-in";
        } else {
            bound[i] = a->kind == PA_I32 ? td_i32_arg(a->param, a->i32) : td_f32_arg(a->param, a->f32);
            sources[i] = "fixed by the plan";
        }
        bound[i].name = a->param;
    }
    return TD_OK;
}

/* A plan's workspace, host segment and fixed scalars follow from the sizes it was made for: a
 * tensor of another shape would run and give wrong results, so it is refused. */
static td_status check_made_for(const td_plan *plan, const td_arg *arg) {
    const js_value *want = plan->shapes ? js_get(plan->shapes, arg->name) : NULL;
    if (!want) return TD_OK;
    int64_t dims[TD_MAX_DIMS];
    int same = arg->tensor.ndim == (int)want->n;
    for (size_t d = 0; d < want->n; d++) {
        dims[d] = want->items[d]->i;
        same = same && arg->tensor.shape[d] == dims[d];
    }
    if (same) return TD_OK;
    char got[160], made[160];
    return td__fail(TD_ERROR_ARGUMENT, "argument '%s': shape %s, but this plan was made for %s; make a plan for "
                    "these sizes (tiledsl plan ... --json)", arg->name,
                    td__ints_text(arg->tensor.shape, arg->tensor.ndim, got, sizeof got),
                    td__ints_text(dims, (int)want->n, made, sizeof made));
}

/* The values of a 1-D i32 device tensor, read back into a malloc'd array (*out, freed by the caller):
 * one small copy on the null stream, which orders it after earlier work on blocking streams, as the
 * host segment's copy is. */
static td_status read_back_i32(const td_arg *arg, int32_t **out, size_t *n) {
    const td_tensor *t = &arg->tensor;
    *out = NULL;
    if (t->dtype != TD_I32 || t->ndim != 1 || t->shape[0] < 1 || (t->shape[0] > 1 && t->strides[0] != 1))
        return td__fail(TD_ERROR_ARGUMENT, "argument '%s': expected a contiguous 1-D i32 tensor of offsets, got "
                        "dtype %s with %d dims", arg->name, td__dtype_name(t->dtype), t->ndim);
    if (!t->data) return td__fail(TD_ERROR_ARGUMENT, "argument '%s': data is NULL", arg->name);
    *n = (size_t)t->shape[0];
    if (!(*out = malloc(*n * sizeof **out))) return td__fail(TD_ERROR_MEMORY, "out of memory");
    char what[160];
    snprintf(what, sizeof what, "hipMemcpy of argument '%s' to the host, to check its values", arg->name);
    return td__hip_check(td__hip.Memcpy(*out, t->data, *n * sizeof **out, TD_HIP_MEMCPY_DEVICE_TO_HOST), what);
}

/* The values of an i32 input a plan was made for (group mode's cu_seqlens: the backward's split
 * counts and workspace offsets follow from them): others would send the kernels' stores past their
 * workspace slices. */
static td_status check_made_for_values(const td_plan *plan, const td_arg *arg) {
    const js_value *want = plan->values ? js_get(plan->values, arg->name) : NULL;
    if (!want) return TD_OK;
    if (arg->tensor.ndim != 1 || arg->tensor.shape[0] != (int64_t)want->n)
        return td__fail(TD_ERROR_ARGUMENT, "argument '%s': expected %zu values (the plan's), got a tensor of %d dims",
                        arg->name, want->n, arg->tensor.ndim);
    int32_t *got;
    size_t n;
    td_status s = read_back_i32(arg, &got, &n);
    size_t at = 0;
    while (s == TD_OK && at < want->n && got[at] == want->items[at]->i) at++;
    if (s == TD_OK && at < want->n) {
        int64_t shown_got[12], shown_want[12];
        int shown = want->n < 12 ? (int)want->n : 12;
        for (int i = 0; i < shown; i++) {
            shown_got[i] = got[i];
            shown_want[i] = want->items[i]->i;
        }
        char g[200], w[200];
        s = td__fail(TD_ERROR_ARGUMENT, "argument '%s': values %s%s, but this plan was made for %s%s (first "
                     "difference at [%zu]); make a plan for these sequence lengths", arg->name,
                     td__ints_text(shown_got, shown, g, sizeof g), want->n > 12 ? " ..." : "",
                     td__ints_text(shown_want, shown, w, sizeof w), want->n > 12 ? " ..." : "", at);
    }
    free(got);
    return s;
}

/* Group mode's offsets (cu_seqlens) as tiledsl.ops checks them: from 0, non-decreasing, within the
 * packed rows of the input `rows` names, no sequence longer than the `longest` scalar (the grid covers
 * that many rows of each sequence: a longer one would have rows left unwritten). */
static td_status check_offsets(const td_plan *plan, const td_arg *args, int nargs, const td_arg *arg) {
    const js_value *spec = plan->offsets ? js_get(plan->offsets, arg->name) : NULL;
    if (!spec) return TD_OK;
    const js_value *rows = js_get(spec, "rows"), *longest = js_get(spec, "longest");
    const td_arg *packed = lookup(args, nargs, rows->items[0]->s);
    const td_arg *bound = longest ? lookup(args, nargs, longest->s) : NULL;
    int dim = (int)rows->items[1]->i;
    if (!packed || packed->kind != TD_ARG_TENSOR || dim >= packed->tensor.ndim) return TD_OK; /* the stages say */
    int64_t total = packed->tensor.shape[dim];
    int32_t *cu;
    size_t n;
    td_status s = read_back_i32(arg, &cu, &n);
    int64_t most = 0;
    for (size_t i = 1; s == TD_OK && i < n; i++) { /* in 64 bits: two i32 offsets' difference may not fit in 32 */
        int64_t step = (int64_t)cu[i] - cu[i - 1];
        most = step > most ? step : most;
    }
    const char *name = arg->name;
    if (s == TD_OK && n < 2)
        s = td__fail(TD_ERROR_ARGUMENT, "argument '%s': expected length batch + 1 >= 2, got length %zu", name, n);
    if (s == TD_OK && cu[0] != 0) s = td__fail(TD_ERROR_ARGUMENT, "argument '%s': must start at 0, got %d", name, cu[0]);
    if (s == TD_OK) {
        for (size_t i = 1; s == TD_OK && i < n; i++)
            if (cu[i] < cu[i - 1])
                s = td__fail(TD_ERROR_ARGUMENT, "argument '%s': must be non-decreasing, but %s[%zu] = %d < %s[%zu] = %d",
                             name, name, i, cu[i], name, i - 1, cu[i - 1]);
        if (s == TD_OK && cu[n - 1] > total)
            s = td__fail(TD_ERROR_ARGUMENT, "argument '%s': the last offset %d is past the packed sequence length "
                         "%lld (%s.shape[%d])", name, cu[n - 1], (long long)total, packed->name, dim);
        if (s == TD_OK && bound && bound->kind == TD_ARG_I32 && most > bound->i32)
            s = td__fail(TD_ERROR_ARGUMENT, "argument '%s': %d, but %s holds a sequence of %lld rows; pass the "
                         "longest", bound->name, bound->i32, name, (long long)most);
    }
    free(cu);
    return s;
}

td_status td_plan_run(td_plan *plan, const td_arg *args, int nargs, void *workspace, void *stream) {
    td_status s = td__need_init();
    if (s != TD_OK) return s;
    if (!plan) return td__fail(TD_ERROR_ARGUMENT, "td_plan_run: plan is NULL");
    if (nargs < 0 || (nargs && !args)) return td__fail(TD_ERROR_ARGUMENT, "td_plan_run: %d arguments at %p", nargs,
                                                       (const void *)args);
    if (plan->ws_size && !workspace)
        return td__fail(TD_ERROR_ARGUMENT, "plan %s: workspace: the plan needs %zu bytes, got NULL", plan->op,
                        plan->ws_size);
    int nviews = plan->ws_size ? plan->nregions + 2 : 0, maxargs = 0;
    td_arg *views = calloc((size_t)nviews + 1, sizeof *views);
    td_launch *launches = calloc((size_t)plan->nstages + 1, sizeof *launches);
    for (int i = 0; i < plan->nstages; i++) maxargs = plan->stages[i].nargs > maxargs ? plan->stages[i].nargs : maxargs;
    td_arg *bound = calloc((size_t)maxargs + 1, sizeof *bound);
    const char **sources = calloc((size_t)maxargs + 1, sizeof *sources);
    char (*notes)[96] = calloc((size_t)maxargs + 1, sizeof *notes);
    if (!views || !launches || !bound || !sources || !notes) s = td__fail(TD_ERROR_MEMORY, "out of memory");
    if (s == TD_OK && nviews) workspace_views(plan, workspace, views);
    for (int i = 0; s == TD_OK && i < nargs; i++) {
        if (!args[i].name) s = td__fail(TD_ERROR_ARGUMENT, "argument %d has no name", i);
        else if (lookup(views, nviews, args[i].name))
            s = td__fail(TD_ERROR_ARGUMENT, "argument '%s' has the name of the plan's workspace region", args[i].name);
        else if (lookup(args, i, args[i].name))
            s = td__fail(TD_ERROR_ARGUMENT, "argument '%s' given twice", args[i].name);
        else if (args[i].kind == TD_ARG_TENSOR) s = check_made_for(plan, &args[i]);
    }
    if (s == TD_OK && (plan->values || plan->offsets)) s = td__set_device(plan->device);
    for (int i = 0; s == TD_OK && (plan->values || plan->offsets) && i < nargs; i++)
        if (args[i].kind == TD_ARG_TENSOR && (s = check_made_for_values(plan, &args[i])) == TD_OK)
            s = check_offsets(plan, args, nargs, &args[i]);
    /* Everything is checked and packed before the first launch, so a bad argument of the last
     * stage does not leave the first stages' outputs half written. */
    for (int i = 0; s == TD_OK && i < plan->nstages; i++) {
        const plan_stage *st = &plan->stages[i];
        s = bind(st, args, nargs, views, nviews, bound, sources, notes);
        if (s == TD_OK) s = td__prepare_launch(st->kernel, bound, st->nargs, sources, &launches[i]);
        if (s != TD_OK) s = td__context(s, "stage %s (%s)", st->name, st->kernel->name);
    }
    if (s == TD_OK) s = td_plan_prepare_workspace(plan, workspace, stream);
    for (int i = 0; s == TD_OK && i < plan->nstages; i++) {
        s = td__launch(plan->stages[i].kernel, &launches[i], stream);
        if (s != TD_OK) s = td__context(s, "stage %s", plan->stages[i].name);
    }
    for (int i = 0; launches && i < plan->nstages; i++) free(launches[i].kernargs);
    free(views);
    free(launches);
    free(bound);
    free(sources);
    free(notes);
    return s == TD_OK ? s : td__context(s, "plan %s", plan->op);
}

td_status td_plan_run_sized(td_plan *plan, const td_arg *args, int nargs, void *workspace, size_t workspace_bytes,
                            void *stream) {
    td_status s = td__need_init();
    if (s != TD_OK) return s;
    if (!plan) return td__fail(TD_ERROR_ARGUMENT, "td_plan_run_sized: plan is NULL");
    if (workspace && workspace_bytes < plan->ws_size)
        return td__fail(TD_ERROR_ARGUMENT, "plan %s: workspace: the plan needs %zu bytes, got %zu", plan->op,
                        plan->ws_size, workspace_bytes);
    return td_plan_run(plan, args, nargs, workspace, stream);
}
