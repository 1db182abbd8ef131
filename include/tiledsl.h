/* tiledsl.h -- the C runtime for tiledsl kernel packages.
 *
 * Runs the kernels that `tiledsl prebuild ... -o DIR` (or tiledsl.package.write_package) wrote
 * into a kernel package, without Python and without the compiler: open the package, look a
 * kernel up by its package key, launch it with named arguments that are checked against its
 * manifest, or run a multi-stage plan (`tiledsl plan ... --json`, tiledsl.plan.Plan.to_json)
 * over one workspace. HIP is loaded at run time with dlopen, so building this needs no ROCm
 * headers or libraries; see docs/c_runtime.md.
 *
 * Errors: every function returns a td_status; on failure td_last_error() says what and where
 * (the argument's name, expected vs got, the HIP error's name). The message is per thread.
 *
 * Threads: a package, its kernels and plans may be used from several threads; td_plan_run calls
 * sharing one workspace must not overlap (the workspace holds the run's scratch data).
 *
 * Devices: the runtime calls hipSetDevice(device) before its loads, allocations and launches
 * (HIP's current device is per thread) and leaves it set.
 */
#ifndef TILEDSL_H
#define TILEDSL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_MAX_DIMS 8

typedef enum {
    TD_OK = 0,
    TD_ERROR_ARGUMENT = 1,  /* a bad argument: to an API function, or a kernel argument the manifest refuses */
    TD_ERROR_NOT_FOUND = 2, /* no such package directory, file, kernel key or plan input */
    TD_ERROR_PACKAGE = 3,   /* a package, manifest or plan that cannot be used: bad JSON, corrupted file, ... */
    TD_ERROR_HIP = 4,       /* the HIP library cannot be loaded, or a HIP call failed */
    TD_ERROR_STATE = 5,     /* td_init not called yet, or called before with another library */
    TD_ERROR_MEMORY = 6,    /* out of host memory */
} td_status;

/* Element types, as the manifests name them (0 is no type, so a zeroed td_tensor is refused). */
typedef enum {
    TD_F32 = 1, TD_F16 = 2, TD_BF16 = 3, TD_I32 = 4, TD_I64 = 5, TD_I1 = 6, TD_F8E4M3 = 7, TD_F8E5M2 = 8,
} td_dtype;

/* A tensor in device memory: element [i0, i1, ...] is at data + sum(i_k * strides[k]) elements.
 * Strides may be 0 (a broadcast dim) but not negative. */
typedef struct {
    void *data;
    td_dtype dtype;
    int ndim;
    int64_t shape[TD_MAX_DIMS];
    int64_t strides[TD_MAX_DIMS]; /* in elements, not bytes */
} td_tensor;

typedef enum { TD_ARG_TENSOR = 1, TD_ARG_I32 = 2, TD_ARG_F32 = 3 } td_arg_kind;

/* One named argument: a kernel parameter (td_kernel_launch) or a plan input (td_plan_run).
 * An f32 parameter also takes an i32 value; an i32 parameter takes only an i32. */
typedef struct {
    const char *name;
    td_arg_kind kind;
    td_tensor tensor; /* kind TD_ARG_TENSOR */
    int32_t i32;      /* kind TD_ARG_I32 */
    float f32;        /* kind TD_ARG_F32 */
} td_arg;

typedef struct td_package td_package;
typedef struct td_kernel td_kernel;
typedef struct td_plan td_plan;

/* Load the HIP runtime: `hip_library` is a path or soname for dlopen (NULL: "libamdhip64.so").
 * Call once before anything else; calling it again with NULL or the same name does nothing. */
td_status td_init(const char *hip_library);

/* The message of this thread's last failure ("" if none). Valid until the next failing call. */
const char *td_last_error(void);
const char *td_status_name(td_status status);
size_t td_dtype_size(td_dtype dtype); /* bytes per element, 0 for an unknown dtype */

/* Open the package in directory `dir` (reads and checks index.json). */
td_status td_package_open(const char *dir, td_package **out);
/* Close it: unloads every module its kernels loaded. Free its plans first. NULL is allowed. */
void td_package_close(td_package *package);

/* The kernel with package key `key` (the 64 hex digits, or a unique prefix of at least 12 -- the
 * one in the file names) loaded on HIP device `device`. The code object's sha256 is checked
 * against index.json before HIP sees it. The kernel belongs to the package (do not free it);
 * asking again for the same key and device returns the same kernel. */
td_status td_kernel_get(td_package *package, const char *key, int device, td_kernel **out);
const char *td_kernel_name(const td_kernel *kernel);

/* Check `args` against the kernel's manifest (every parameter once, by name: dtype, rank, static
 * dims, one size per shape symbol, stride units, dims the variant assumes multiples of), pack
 * the kernel arguments, evaluate the grid, and launch on `stream` (a hipStream_t; NULL is the
 * null stream). Nothing is launched unless every check passes. An empty grid launches nothing. */
td_status td_kernel_launch(td_kernel *kernel, const td_arg *args, int nargs, void *stream);

/* Load a plan: `plan_json` is the JSON text (starting with '{') or the path of a file holding
 * it. Its kernels are looked up in `package` and loaded on `device`; read-only zero stand-ins
 * the plan fixes are allocated there now and freed by td_plan_free. */
td_status td_plan_load(td_package *package, const char *plan_json, int device, td_plan **out);
void td_plan_free(td_plan *plan); /* NULL is allowed */

size_t td_plan_workspace_size(const td_plan *plan); /* bytes; 0 when the plan needs none */
int td_plan_num_stages(const td_plan *plan);
const char *td_plan_stage_name(const td_plan *plan, int stage); /* NULL when out of range */

/* Copy the plan's host segment to the head of `workspace` and zero the regions that must start
 * at zero (hipMemcpy/hipMemset: ordered after earlier work on blocking streams). td_plan_run
 * does this itself; it is here for a caller that wants the step alone. */
td_status td_plan_prepare_workspace(td_plan *plan, void *workspace, void *stream);

/* Run the plan: binds each stage's references to `args` by name (the call's tensors and scalars;
 * names no stage uses are ignored) or to the workspace (its regions by name, and the whole
 * workspace as i32/f32 words under "ws_i"/"ws_f"), checks every stage's arguments, then prepares
 * the workspace and launches the stages in order on `stream`. `workspace`: device memory of at
 * least td_plan_workspace_size bytes (may be NULL when that is 0). */
td_status td_plan_run(td_plan *plan, const td_arg *args, int nargs, void *workspace, void *stream);
/* td_plan_run, told the workspace's size: one smaller than the plan needs is refused (td_plan_run
 * cannot know it, and a kernel would write past its end). */
td_status td_plan_run_sized(td_plan *plan, const td_arg *args, int nargs, void *workspace, size_t workspace_bytes,
                            void *stream);

/* Helpers to build arguments. */
static inline td_arg td_tensor_arg(const char *name, td_tensor tensor) {
    td_arg a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.kind = TD_ARG_TENSOR;
    a.tensor = tensor;
    return a;
}

static inline td_arg td_i32_arg(const char *name, int32_t value) {
    td_arg a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.kind = TD_ARG_I32;
    a.i32 = value;
    return a;
}

static inline td_arg td_f32_arg(const char *name, float value) {
    td_arg a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.kind = TD_ARG_F32;
    a.f32 = value;
    return a;
}

/* A row-major contiguous tensor of `ndim` dims (at most TD_MAX_DIMS). */
static inline td_tensor td_contiguous(void *data, td_dtype dtype, int ndim, const int64_t *shape) {
    td_tensor t;
    memset(&t, 0, sizeof t);
    int64_t stride = 1;
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = ndim - 1; i >= 0 && i < TD_MAX_DIMS; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = stride;
        stride *= shape[i];
    }
    return t;
}

#ifdef __cplusplus
}
#endif

#endif /* TILEDSL_H */
