/* Kernel packages: index.json, code objects checked by sha256, manifests read into td_kernel. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

struct td_package {
    char *root;
    js_doc *index;
    const js_value *kernels; /* index.json's "kernels": key -> entry */
    pthread_mutex_t lock;    /* guards `loaded` */
    td_kernel *loaded;       /* every (key, device) loaded so far */
};

typedef struct { td_kernel base; void *image; } loaded_kernel; /* HIP may keep reading the image */

static const char *str_field(const js_value *obj, const char *key) {
    const js_value *v = js_get(obj, key);
    return v && v->type == JS_STRING ? v->s : NULL;
}

/* ---- opening ---------------------------------------------------------------------------------- */
/* A relative path with no '..' component: index.json's files stay inside the package directory. */
static int inside_package(const char *path) {
    if (!*path || *path == '/') return 0;
    for (const char *p = path; *p;) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return 0;
        p += n + (end != NULL);
    }
    return 1;
}

td_status td_package_open(const char *dir, td_package **out) {
    if (!dir || !out) return td__fail(TD_ERROR_ARGUMENT, "td_package_open: dir and out must not be NULL");
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return td__fail(TD_ERROR_NOT_FOUND, "kernel package %s: no such directory", dir);
    size_t len = strlen(dir);
    char *path = malloc(len + sizeof "/index.json");
    if (!path) return td__fail(TD_ERROR_MEMORY, "out of memory");
    snprintf(path, len + sizeof "/index.json", "%s/index.json", dir);
    char *text;
    size_t size;
    td_status s = td__read_file(path, "package index", &text, &size);
    free(path);
    if (s == TD_ERROR_NOT_FOUND)
        return td__fail(s, "kernel package %s: no index.json (write one with `tiledsl prebuild --receipt NAME "
                           "--arch ARCH -o %s`)", dir, dir);
    if (s != TD_OK) return td__context(s, "kernel package %s", dir);
    char err[256];
    js_doc *doc = js_parse(text, size, err, sizeof err);
    free(text);
    if (!doc) return td__fail(TD_ERROR_PACKAGE, "kernel package %s: index.json is not valid JSON (%s); rebuild the "
                                                "package", dir, err);
    const js_value *root = js_root(doc);
    const char *format = str_field(root, "format");
    const js_value *version = js_get(root, "version");
    const js_value *kernels = js_get(root, "kernels"), *variants = js_get(root, "variants");
    if (!format || strcmp(format, "tiledsl-kernel-package")) {
        s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: index.json is not a tiledsl kernel package index", dir);
    } else if (!version || !version->is_int || version->i != 1) {
        s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: format version %s, this runtime reads version 1; rebuild "
                     "the package", dir, !version ? "missing" : version->is_int ? "other than 1" : "not an integer");
    } else if (!kernels || kernels->type != JS_OBJECT || !variants || variants->type != JS_OBJECT) {
        s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: index.json lacks its 'kernels' or 'variants' table", dir);
    }
    static const char *needed[] = {"arch", "kernel", "hsaco", "manifest", "sha256"};
    for (size_t i = 0; s == TD_OK && i < kernels->n; i++)
        for (size_t f = 0; f < sizeof needed / sizeof needed[0]; f++) {
            const char *value = str_field(kernels->items[i], needed[f]);
            if (!value) {
                s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: index.json entry %.16s... lacks '%s'", dir,
                             kernels->keys[i], needed[f]);
                break;
            }
            if ((f == 2 || f == 3) && !inside_package(value)) { /* hsaco, manifest: files of the package */
                s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: index.json entry %.16s... names the %s file "
                             "'%s', which is not a path inside the package; rebuild the package", dir,
                             kernels->keys[i], needed[f], value);
                break;
            }
        }
    td_package *p = s == TD_OK ? calloc(1, sizeof *p) : NULL;
    if (s == TD_OK && (!p || !(p->root = strdup(dir)))) {
        free(p);
        s = td__fail(TD_ERROR_MEMORY, "out of memory");
    }
    if (s != TD_OK) {
        js_free(doc);
        return s;
    }
    p->index = doc;
    p->kernels = kernels;
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return TD_OK;
}

void td_package_close(td_package *p) {
    if (!p) return;
    for (td_kernel *k = p->loaded; k;) {
        td_kernel *next = k->next;
        if (k->module && td__hip.ModuleUnload) td__hip.ModuleUnload(k->module);
        js_free(k->manifest);
        free(k->tensors);
        free(k->params);
        free(k->param_tensor);
        free(k->param_f32);
        free(k->kernargs);
        free(k->dim_units);
        free(k->constexprs);
        free(k->requires);
        free(((loaded_kernel *)k)->image);
        free(k);
        k = next;
    }
    pthread_mutex_destroy(&p->lock);
    js_free(p->index);
    free(p->root);
    free(p);
}

const char *td_kernel_name(const td_kernel *k) { return k ? k->name : NULL; }

/* ---- manifests ---------------------------------------------------------------------------------- */
#define BAD(...) (td__fail(TD_ERROR_PACKAGE, __VA_ARGS__))

static td_status int_field(const js_value *obj, const char *key, const char *path, int64_t lo, int64_t hi,
                           int64_t *out) {
    const js_value *v = js_get(obj, key);
    if (!v || !v->is_int || v->i < lo || v->i > hi)
        return BAD("manifest %s: '%s' must be an integer in %lld..%lld", path, key, (long long)lo, (long long)hi);
    *out = v->i;
    return TD_OK;
}

static td_status read_tensors(td_kernel *k, const js_value *m, const char *path) {
    const js_value *list = js_get(m, "tensors");
    if (!list || list->type != JS_ARRAY) return BAD("manifest %s: no 'tensors' list", path);
    k->tensors = calloc(list->n + 1, sizeof *k->tensors);
    if (!k->tensors) return td__fail(TD_ERROR_MEMORY, "out of memory");
    k->ntensors = (int)list->n;
    for (size_t i = 0; i < list->n; i++) {
        const js_value *t = list->items[i], *dims = js_get(t, "dims"), *unit = js_get(t, "stride_unit");
        const js_value *ulast = js_get(t, "unit_last_stride"), *buffer = js_get(t, "buffer");
        td_tensor_spec *spec = &k->tensors[i];
        spec->name = str_field(t, "name");
        spec->dtype = td__dtype_from_name(str_field(t, "dtype"));
        if (!spec->name || !spec->dtype || !dims || dims->type != JS_ARRAY || dims->n < 1 || dims->n > TD_MAX_DIMS)
            return BAD("manifest %s: tensor %zu needs a name, a known dtype and 1 to %d dims", path, i, TD_MAX_DIMS);
        spec->ndim = (int)dims->n;
        for (size_t d = 0; d < dims->n; d++) {
            const js_value *dim = dims->items[d];
            if (dim->type == JS_STRING) spec->sym[d] = dim->s;
            else if (dim->is_int && dim->i >= 0) spec->dims[d] = dim->i;
            else return BAD("manifest %s: tensor '%s' dim %zu is neither a size nor a symbol", path, spec->name, d);
        }
        spec->unit_last_stride = ulast && ulast->type == JS_BOOL && ulast->boolean;
        spec->stride_unit = unit && unit->is_int ? unit->i : 1;
        spec->buffer = buffer && buffer->type == JS_BOOL && buffer->boolean;
        const js_value *written = js_get(t, "written");
        spec->written = written && written->type == JS_BOOL && written->boolean;
        if (spec->stride_unit < 1) return BAD("manifest %s: tensor '%s' has stride_unit < 1", path, spec->name);
        const js_value *rows = js_get(t, "row_bounds");
        if (rows && rows->type != JS_ARRAY) return BAD("manifest %s: tensor '%s' row_bounds is not a list", path, spec->name);
        for (size_t r = 0; rows && r < rows->n; r++) {
            const js_value *d = rows->items[r];
            if (!d->is_int || d->i < 0 || d->i >= spec->ndim)
                return BAD("manifest %s: tensor '%s' row_bounds holds %s, not a dim (0..%d)", path, spec->name,
                           d->is_int ? "a dim out of range" : "a non-integer", spec->ndim - 1);
            spec->row_bounds |= 1u << d->i;
        }
    }
    return TD_OK;
}

static int find_tensor(const td_kernel *k, const char *name) {
    for (int i = 0; name && i < k->ntensors; i++)
        if (!strcmp(k->tensors[i].name, name)) return i;
    return -1;
}

static td_status read_kernargs(td_kernel *k, const js_value *m, const char *path) {
    const js_value *list = js_get(m, "kernargs"), *scalars = js_get(m, "scalars");
    if (!list || list->type != JS_ARRAY || !scalars || scalars->type != JS_ARRAY)
        return BAD("manifest %s: no 'kernargs' or 'scalars' list", path);
    size_t n = list->n + 1;
    k->kernargs = calloc(n, sizeof *k->kernargs);
    k->params = calloc(n, sizeof *k->params);
    k->param_tensor = calloc(n, sizeof *k->param_tensor);
    k->param_f32 = calloc(n, sizeof *k->param_f32);
    if (!k->kernargs || !k->params || !k->param_tensor || !k->param_f32)
        return td__fail(TD_ERROR_MEMORY, "out of memory");
    for (size_t i = 0; i < list->n; i++) {
        const js_value *a = list->items[i];
        const char *kind = str_field(a, "kind"), *dtype = str_field(a, "dtype");
        td_kernarg *ka = &k->kernargs[k->nkernargs++];
        int64_t offset = 0, size = 0, dim = 0;
        ka->name = str_field(a, "name");
        if (!kind || !ka->name) return BAD("manifest %s: kernarg %zu has no kind or name", path, i);
        td_status s = int_field(a, "offset", path, 0, 1 << 20, &offset);
        if (s == TD_OK) s = int_field(a, "size", path, 1, 8, &size);
        if (s != TD_OK) return s;
        ka->offset = (size_t)offset;
        if ((uint64_t)offset + (uint64_t)size > k->kernarg_size)
            return BAD("manifest %s: kernarg '%s' ends past kernarg_size", path, ka->name);
        if (!strcmp(kind, "pointer") || !strcmp(kind, "scalar")) {
            int pointer = kind[0] == 'p';
            ka->kind = pointer ? KA_POINTER : KA_SCALAR;
            ka->param = k->nparams;
            k->params[k->nparams] = ka->name;
            k->param_tensor[k->nparams] = pointer ? find_tensor(k, ka->name) : -1;
            ka->tensor = k->param_tensor[k->nparams];
            if (pointer && (ka->tensor < 0 || size != 8))
                return BAD("manifest %s: pointer '%s' is not an 8-byte tensor of the manifest", path, ka->name);
            if (!pointer) {
                if (!dtype || (strcmp(dtype, "i32") && strcmp(dtype, "f32")) || size != 4)
                    return BAD("manifest %s: scalar '%s' is not a 4-byte i32 or f32", path, ka->name);
                ka->f32 = k->param_f32[k->nparams] = !strcmp(dtype, "f32");
            }
            k->nparams++;
        } else if (!strcmp(kind, "stride")) {
            ka->kind = KA_STRIDE;
            ka->tensor = find_tensor(k, str_field(a, "tensor"));
            s = int_field(a, "dim", path, 0, TD_MAX_DIMS - 1, &dim);
            if (s != TD_OK) return s;
            ka->dim = (int)dim;
            if (ka->tensor < 0 || ka->dim >= k->tensors[ka->tensor].ndim || size != 4)
                return BAD("manifest %s: stride '%s' names no dim of a tensor", path, ka->name);
        } else if (!strcmp(kind, "shape")) {
            ka->kind = KA_SHAPE;
            if (size != 4) return BAD("manifest %s: shape '%s' is not 4 bytes", path, ka->name);
        } else {
            return BAD("manifest %s: kernarg '%s' has unknown kind '%s'", path, ka->name, kind);
        }
    }
    /* Every tensor of the manifest is a pointer parameter, and every declared scalar one. */
    for (int t = 0; t < k->ntensors; t++) {
        int found = 0;
        for (int p = 0; p < k->nparams; p++) found |= k->param_tensor[p] == t;
        if (!found) return BAD("manifest %s: tensor '%s' has no pointer kernarg", path, k->tensors[t].name);
    }
    for (size_t i = 0; i < scalars->n; i++) {
        const char *name = str_field(scalars->items[i], "name");
        int found = 0;
        for (int p = 0; name && p < k->nparams; p++) found |= k->param_tensor[p] < 0 && !strcmp(k->params[p], name);
        if (!found) return BAD("manifest %s: scalar %zu has no kernarg", path, i);
    }
    return TD_OK;
}

/* An object of name -> integer as bindings; `positive`: only values > 1 (dim_units). */
static td_status read_bindings(const js_value *obj, td_binding **out, int *n) {
    *n = 0;
    *out = calloc(obj && obj->type == JS_OBJECT ? obj->n + 1 : 1, sizeof **out);
    if (!*out) return td__fail(TD_ERROR_MEMORY, "out of memory");
    for (size_t i = 0; obj && obj->type == JS_OBJECT && i < obj->n; i++) {
        const js_value *v = obj->items[i];
        /* Python's grid evaluation binds the int constexprs, and bools are ints there. */
        if (v->is_int || v->type == JS_BOOL) (*out)[(*n)++] = (td_binding){obj->keys[i], v->is_int ? v->i : v->boolean};
    }
    return TD_OK;
}

td_status td__kernel_from_manifest(td_kernel *k, const char *path) {
    const js_value *m = js_root(k->manifest), *grid = js_get(m, "grid"), *wg = js_get(m, "workgroup_size");
    int64_t size, segment = 0;
    k->name = str_field(m, "kernel");
    k->symbol = str_field(m, "symbol");
    k->arch = str_field(m, "arch");
    if (!k->name || !k->symbol || !k->arch) return BAD("manifest %s: no kernel, symbol or arch", path);
    td_status s = int_field(m, "kernarg_size", path, 0, 1 << 20, &size);
    if (s != TD_OK) return s;
    if (js_get(m, "kernarg_segment_size")) {
        s = int_field(m, "kernarg_segment_size", path, 0, 1 << 20, &segment);
        if (s != TD_OK) return s;
    }
    k->kernarg_size = (size_t)size;
    if (!grid || grid->type != JS_ARRAY || grid->n < 1 || grid->n > 3)
        return BAD("manifest %s: 'grid' must be a list of 1 to 3 formulas", path);
    for (int i = 0; i < 3; i++) {
        k->grid[i] = (size_t)i < grid->n ? (grid->items[i]->type == JS_STRING ? grid->items[i]->s : NULL) : "1";
        if (!k->grid[i]) return BAD("manifest %s: grid formula %d is not a string", path, i);
    }
    if (!wg || wg->type != JS_ARRAY || wg->n != 3) return BAD("manifest %s: 'workgroup_size' must be 3 sizes", path);
    for (int i = 0; i < 3; i++) {
        if (!wg->items[i]->is_int || wg->items[i]->i < 1 || wg->items[i]->i > 1024)
            return BAD("manifest %s: workgroup_size[%d] outside 1..1024", path, i);
        k->block[i] = (unsigned)wg->items[i]->i;
    }
    if ((s = read_tensors(k, m, path)) != TD_OK || (s = read_kernargs(k, m, path)) != TD_OK) return s;
    if ((s = read_bindings(js_get(m, "dim_units"), &k->dim_units, &k->ndim_units)) != TD_OK) return s;
    for (int i = 0; i < k->ndim_units; i++)
        if (k->dim_units[i].value < 1) return BAD("manifest %s: dim unit of %s < 1", path, k->dim_units[i].name);
    if ((s = read_bindings(js_get(m, "constexprs"), &k->constexprs, &k->nconstexprs)) != TD_OK) return s;
    const js_value *req = js_get(m, "requires");
    if (req && req->type != JS_ARRAY) return BAD("manifest %s: 'requires' must be a list of conditions", path);
    k->nrequires = req ? (int)req->n : 0;
    k->requires = calloc((size_t)k->nrequires + 1, sizeof *k->requires);
    if (!k->requires) return td__fail(TD_ERROR_MEMORY, "out of memory");
    for (int i = 0; i < k->nrequires; i++) {
        if (req->items[i]->type != JS_STRING) return BAD("manifest %s: requires[%d] is not a string", path, i);
        k->requires[i] = req->items[i]->s;
    }
    /* Pack the whole kernarg segment (hidden arguments after ours stay zero; HIP fills them). */
    if ((size_t)segment > k->kernarg_size) k->kernarg_size = (size_t)segment;
    return TD_OK;
}

/* ---- looking kernels up ------------------------------------------------------------------------- */
static td_status find_entry(td_package *p, const char *key, const char **full, const js_value **entry) {
    size_t len = strlen(key), matches = 0;
    int hex = len >= 12 && len <= 64;
    for (size_t i = 0; hex && i < len; i++) /* lower case, as index.json writes them */
        hex = (key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f');
    if (!hex)
        return td__fail(TD_ERROR_ARGUMENT, "kernel key '%s': expected 64 lower-case hex digits, or a prefix of at "
                        "least 12 of them", key);
    for (size_t i = 0; i < p->kernels->n; i++)
        if (!strncmp(p->kernels->keys[i], key, len)) {
            if (matches++) return td__fail(TD_ERROR_ARGUMENT, "kernel key '%s' is ambiguous in package %s: it starts "
                                           "%s and %s", key, p->root, *full, p->kernels->keys[i]);
            *full = p->kernels->keys[i];
            *entry = p->kernels->items[i];
        }
    if (!matches)
        return td__fail(TD_ERROR_NOT_FOUND, "kernel package %s: no kernel with key %s (it holds %zu kernels)",
                        p->root, key, p->kernels->n);
    return TD_OK;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* What HIP would be handed blind: a 64-bit little-endian AMDGPU ELF whose header tables, loaded
 * segments, sections and notes lie in the file, with sane segment sizes and symbol tables (what
 * tiledsl's elf.read_code_object checks before it reads the metadata), or why not (NULL: it is
 * one). A code object is loaded into one GPU address range: a segment past 4 GiB is corrupted. */
#define ELF_MAX_ADDRESS ((uint64_t)1 << 32)
static const char *elf_problem(const unsigned char *image, size_t size) {
    if (size < 64 || memcmp(image, "\x7f" "ELF", 4)) return "no ELF header";
    if (image[4] != 2 || image[5] != 1) return "not a 64-bit little-endian ELF";
    if (le(image + 18, 2) != 224) return "not for an AMDGPU machine";
    uint64_t phoff = le(image + 32, 8), shoff = le(image + 40, 8);
    uint64_t phent = le(image + 54, 2), phnum = le(image + 56, 2), shent = le(image + 58, 2), shnum = le(image + 60, 2);
    if (phnum && phent < 56) return "its program header entries are too short";
    if (shnum && shent < 64) return "its section header entries are too short";
    if (phoff > size || phent * phnum > size - phoff) return "its program headers lie past its end: truncated";
    if (shoff > size || shent * shnum > size - shoff) return "its section headers lie past its end: truncated";
    for (uint64_t i = 0; i < phnum; i++) {
        const unsigned char *ph = image + phoff + i * phent;
        uint64_t off = le(ph + 8, 8), vaddr = le(ph + 16, 8), filesz = le(ph + 32, 8), memsz = le(ph + 40, 8);
        if (le(ph, 4) != 1) continue; /* PT_LOAD only */
        if (off > size || filesz > size - off) return "a loaded segment lies past its end: truncated or corrupted";
        if (memsz < filesz || vaddr > ELF_MAX_ADDRESS || memsz > ELF_MAX_ADDRESS - vaddr)
            return "a loaded segment has a corrupted size";
    }
    for (uint64_t i = 0; i < shnum; i++) {
        const unsigned char *sh = image + shoff + i * shent;
        uint64_t type = le(sh + 4, 4), off = le(sh + 24, 8), sz = le(sh + 32, 8);
        if (type == 8) continue; /* SHT_NOBITS: no bytes in the file */
        if (off > size || sz > size - off) return "a section lies past its end: truncated or corrupted";
        if ((type == 2 || type == 11) && (le(sh + 56, 8) != 24 || le(sh + 40, 4) >= shnum))
            return "a symbol table is corrupted";
        for (uint64_t pos = off; type == 7 && pos + 12 <= off + sz;) { /* SHT_NOTE: each note inside it */
            uint64_t namesz = le(image + pos, 4), descsz = le(image + pos + 4, 4);
            uint64_t desc = pos + 12 + ((namesz + 3) & ~(uint64_t)3);
            if (desc > off + sz || descsz > off + sz - desc) return "a note runs past the end of its section";
            pos = desc + ((descsz + 3) & ~(uint64_t)3);
        }
    }
    return NULL;
}

/* Read, check and load one kernel (the package lock is held). */
static td_status load_kernel(td_package *p, const char *key, const js_value *entry, int device, td_kernel **out) {
    const char *hsaco = str_field(entry, "hsaco"), *manifest = str_field(entry, "manifest");
    size_t root_len = strlen(p->root), size;
    char path[4096], digest[65], *image = NULL, *text = NULL;
    td_status s;
    snprintf(path, sizeof path, "%.*s/%s", (int)root_len, p->root, hsaco);
    if ((s = td__read_file(path, "code object", &image, &size)) != TD_OK)
        return td__context(s, "kernel package %s", p->root);
    td__sha256_hex(image, size, digest);
    if (strcmp(digest, str_field(entry, "sha256"))) {
        free(image);
        return td__fail(TD_ERROR_PACKAGE, "kernel package %s: %s is corrupted (its sha256 does not match index.json); "
                        "rebuild the package with `tiledsl prebuild ... -o %s`", p->root, hsaco, p->root);
    }
    const char *problem = elf_problem((const unsigned char *)image, size);
    if (problem) {
        free(image);
        return td__fail(TD_ERROR_PACKAGE, "kernel package %s: %s is not an AMDGPU code object (%s); rebuild the "
                        "package with `tiledsl prebuild ... -o %s`", p->root, hsaco, problem, p->root);
    }
    loaded_kernel *lk = calloc(1, sizeof *lk);
    if (!lk) { free(image); return td__fail(TD_ERROR_MEMORY, "out of memory"); }
    td_kernel *k = &lk->base;
    lk->image = image;
    k->package = p;
    k->device = device;
    snprintf(k->key, sizeof k->key, "%s", key);
    snprintf(path, sizeof path, "%.*s/%s", (int)root_len, p->root, manifest);
    char err[256];
    /* Required here: the Python loader checks a manifest against its code object, this runtime
     * cannot parse the code object's metadata and trusts the manifest by its digest alone. */
    const char *manifest_digest = str_field(entry, "manifest_sha256");
    if (!manifest_digest) {
        s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: index.json records no manifest_sha256 string for %s (a "
                     "package written before manifest digests, or an edited index); the C runtime trusts a manifest "
                     "only by its digest: rebuild the package with `tiledsl prebuild ... -o %s`", p->root, manifest,
                     p->root);
    } else if ((s = td__read_file(path, "manifest", &text, &size)) != TD_OK) {
        s = td__context(s, "kernel package %s", p->root);
    } else if (td__sha256_hex(text, size, digest), strcmp(digest, manifest_digest)) {
        s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: %s is corrupted (its sha256 does not match index.json: "
                     "it was edited or damaged); rebuild the package with `tiledsl prebuild ... -o %s`", p->root,
                     manifest, p->root);
    } else if (!(k->manifest = js_parse(text, size, err, sizeof err))) {
        s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: %s is not valid JSON (%s); rebuild the package", p->root,
                     manifest, err);
    } else if ((s = td__kernel_from_manifest(k, manifest)) != TD_OK) {
        s = td__context(s, "kernel package %s", p->root);
    } else if (strcmp(k->arch, str_field(entry, "arch"))) {
        s = td__fail(TD_ERROR_PACKAGE, "kernel package %s: %s is not the manifest of a %s kernel; rebuild the package",
                     p->root, manifest, str_field(entry, "arch"));
    }
    free(text);
    char what[512];
    snprintf(what, sizeof what, "hipModuleLoadData(%s, a %s code object, on device %d)", hsaco, k->arch ? k->arch : "?",
             device);
    if (s == TD_OK) s = td__set_device(device);
    if (s == TD_OK) s = td__hip_check(td__hip.ModuleLoadData(&k->module, image), what);
    if (s == TD_OK) {
        snprintf(what, sizeof what, "hipModuleGetFunction(%s) in %s", k->symbol, hsaco);
        s = td__hip_check(td__hip.ModuleGetFunction(&k->function, k->module, k->symbol), what);
    }
    /* Listed even when it failed, so td_package_close frees it; a failed kernel is never returned. */
    k->next = p->loaded;
    p->loaded = k;
    if (s != TD_OK) {
        k->key[0] = 0;
        return s;
    }
    *out = k;
    return TD_OK;
}

td_status td_kernel_get(td_package *p, const char *key, int device, td_kernel **out) {
    td_status s = td__need_init();
    if (s != TD_OK) return s;
    if (!p || !key || !out) return td__fail(TD_ERROR_ARGUMENT, "td_kernel_get: package, key and out must not be NULL");
    *out = NULL;
    const char *full = NULL;
    const js_value *entry = NULL;
    if ((s = find_entry(p, key, &full, &entry)) != TD_OK) return s;
    pthread_mutex_lock(&p->lock);
    for (td_kernel *k = p->loaded; k; k = k->next)
        if (k->device == device && !strcmp(k->key, full)) {
            *out = k;
            pthread_mutex_unlock(&p->lock);
            return TD_OK;
        }
    s = load_kernel(p, full, entry, device, out);
    pthread_mutex_unlock(&p->lock);
    return s;
}
