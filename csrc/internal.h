/* Declarations shared by the runtime's C files (not installed; the API is include/tiledsl.h). */
#ifndef TILEDSL_INTERNAL_H
#define TILEDSL_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "tiledsl.h"

/* Everything declared here stays inside the shared library: only tiledsl.h's API is exported. */
#pragma GCC visibility push(hidden)

/* ---- errors (runtime.c) ------------------------------------------------------------------- */
/* Set this thread's message and return `status`. */
td_status td__fail(td_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Put "`prefix`: " in front of this thread's message (context added on the way out). */
td_status td__context(td_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
td_dtype td__dtype_from_name(const char *name);
const char *td__dtype_name(td_dtype dtype);
int td__hex_digit(int c);

/* ---- HIP, loaded with dlopen (runtime.c) --------------------------------------------------- */
typedef int hipError_t;
typedef struct {
    const char *(*GetErrorName)(hipError_t);
    hipError_t (*SetDevice)(int);
    hipError_t (*Malloc)(void **, size_t);
    hipError_t (*Free)(void *);
    hipError_t (*Memcpy)(void *, const void *, size_t, int);
    hipError_t (*Memset)(void *, int, size_t);
    hipError_t (*ModuleLoadData)(void **, const void *);
    hipError_t (*ModuleUnload)(void *);
    hipError_t (*ModuleGetFunction)(void **, void *, const char *);
    hipError_t (*ModuleLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     void *, void **, void **);
} td_hip_api;
extern td_hip_api td__hip;
enum { TD_HIP_MEMCPY_HOST_TO_DEVICE = 1, TD_HIP_MEMCPY_DEVICE_TO_HOST = 2 };
/* TD_OK, or td__fail naming `what` (the call) and the HIP error's name. */
td_status td__hip_check(hipError_t err, const char *what);
td_status td__need_init(void);
/* hipSetDevice(device): the runtime sets the calling thread's device before every HIP call that
 * acts on one (HIP's current device is per thread), and leaves it set. */
td_status td__set_device(int device);

/* "[2, 90, 2, 64]": the first n (at most TD_MAX_DIMS) of v, into buf (launch.c). */
const char *td__ints_text(const int64_t *v, int n, char *buf, size_t size);

/* ---- JSON (json.c) ------------------------------------------------------------------------- */
typedef enum { JS_NULL, JS_BOOL, JS_NUMBER, JS_STRING, JS_ARRAY, JS_OBJECT } js_type;
typedef struct js_value {
    js_type type;
    int boolean;
    int is_int;    /* a number written without fraction or exponent that fits int64 */
    int64_t i;     /* its value when is_int */
    double d;      /* every number */
    const char *s; /* strings: NUL-terminated (a "\u0000" inside is refused) */
    size_t n;      /* items of an array, members of an object */
    struct js_value **items;
    const char **keys; /* objects: the member names, in order */
} js_value;
typedef struct js_doc js_doc; /* owns every value and string of one parse */

/* Parse `text` (`len` bytes). NULL on failure, with `err` saying what and at which line:column. */
js_doc *js_parse(const char *text, size_t len, char *err, size_t errlen);
const js_value *js_root(const js_doc *doc);
void js_free(js_doc *doc);
const js_value *js_get(const js_value *object, const char *key); /* NULL if absent or not an object */
const char *js_type_name(js_type type);

/* ---- sha256 (sha256.c) --------------------------------------------------------------------- */
void td__sha256_hex(const void *data, size_t len, char out[65]);

/* ---- grid formulas (grid.c) ------------------------------------------------------------------ */
typedef struct { const char *name; int64_t value; } td_binding;
/* Evaluate one grid expression (Python syntax: + - * // / % << >> & | ^, cdiv/min/max). */
td_status td__eval_formula(const char *text, const td_binding *values, int nvalues, int64_t *out);
/* Evaluate one requires(...) condition as tiledsl/grid.py renders it: comparisons of formulas,
 * each in parentheses, joined by and/or/not (also parenthesized). *out is 0 or 1. */
td_status td__eval_condition(const char *text, const td_binding *values, int nvalues, int *out);

/* ---- files (runtime.c) ---------------------------------------------------------------------- */
/* Read a whole file into a malloc'd buffer (NUL-terminated); `what` names it in errors. */
td_status td__read_file(const char *path, const char *what, char **data, size_t *size);

/* ---- kernels (package.c, launch.c) ------------------------------------------------------------ */
enum { KA_POINTER, KA_STRIDE, KA_SHAPE, KA_SCALAR };

typedef struct {
    const char *name;
    td_dtype dtype;
    int ndim;
    int64_t dims[TD_MAX_DIMS];      /* static size, when sym[i] is NULL */
    const char *sym[TD_MAX_DIMS];   /* shape symbol, or NULL */
    int unit_last_stride;           /* the last dim's stride is 1 and not passed */
    int64_t stride_unit;            /* passed strides are multiples of this, passed divided by it */
    int buffer;                     /* addressed with buffer instructions: its byte span must be <= 2 GiB */
    uint32_t row_bounds;            /* bit d: a buffer descriptor bounds dim d's rows (stride > last dim's span) */
    int written;                    /* the kernel writes it: its elements must be distinct */
} td_tensor_spec;

typedef struct {
    int kind;          /* KA_* */
    const char *name;  /* parameter, "q.stride0", or shape symbol */
    int tensor;        /* pointers and strides: index into tensors */
    int dim;           /* strides */
    int param;         /* pointers and scalars: index into params */
    int f32;           /* scalars: f32 (else i32) */
    size_t offset;
} td_kernarg;

struct td_kernel {
    struct td_kernel *next; /* the package's list */
    td_package *package;
    char key[65];
    int device;
    js_doc *manifest; /* owns the strings below */
    const char *name, *symbol, *arch;
    td_tensor_spec *tensors;
    int ntensors;
    const char **params; /* pointer and scalar parameters, in declaration order */
    int *param_tensor;   /* per parameter: index into tensors, or -1 for a scalar */
    int *param_f32;      /* per scalar parameter: its dtype is f32 */
    int nparams;
    td_kernarg *kernargs;
    int nkernargs;
    td_binding *dim_units;  /* symbol -> unit (> 1) */
    int ndim_units;
    td_binding *constexprs; /* the integer ones, for the grid */
    int nconstexprs;
    const char *grid[3];
    const char **requires; /* requires(...) conditions, checked before every launch */
    int nrequires;
    unsigned block[3];
    size_t kernarg_size; /* what we pack: the code object's whole segment, hidden arguments zero */
    void *module, *function;
};

/* A checked launch: the grid and the packed kernel arguments (malloc'd). */
typedef struct {
    unsigned grid[3];
    unsigned char *kernargs;
    size_t size;
} td_launch;

td_status td__kernel_from_manifest(td_kernel *k, const char *path);
/* Check `args` and pack them; `sources` (NULL, or one per argument): where a plan took each
 * argument from, for the messages. On success out->kernargs is malloc'd. */
td_status td__prepare_launch(const td_kernel *k, const td_arg *args, int nargs, const char *const *sources,
                             td_launch *out);
td_status td__launch(const td_kernel *k, const td_launch *launch, void *stream);

#pragma GCC visibility pop

#endif
