// The attention backward from C: a kernel package, the plan's JSON, HIP device memory.
//
//   tiledsl prebuild --variant gfx942/fmha_bwd-f16-batch-d128-causal-deterministic -o kernels/
//   tiledsl plan fmha_bwd --arch gfx942 --hdim 128 --heads 16/4 --batch 2 --seqlen 1024 --mask causal
//       --deterministic --json > bwd.json                  (one command)
//   cc -std=c11 -O2 -Iinclude examples/c/attention.c csrc/*.c -ldl -lpthread -lamdhip64 -o attention
//   ./attention kernels/ bwd.json
//
// The shapes below are the ones the plan was made for. The inputs would come from the forward
// pass (out and lse from fmha_fwd with return_lse); here they are zeros.
#include <stdio.h>
#include <stdlib.h>

#include "tiledsl.h"

/* The HIP functions this program calls itself. With ROCm installed, include
 * <hip/hip_runtime_api.h> instead; the runtime (tiledsl.h) needs no HIP headers. */
extern int hipSetDevice(int device);
extern int hipMalloc(void **ptr, size_t size);
extern int hipMemset(void *ptr, int value, size_t size);
extern int hipFree(void *ptr);
extern int hipDeviceSynchronize(void);

enum { B = 2, S = 1024, HQ = 16, HK = 4, D = 128, DEVICE = 0 };

#define CHECK(call)                                                                               \
    do {                                                                                          \
        td_status status_ = (call);                                                               \
        if (status_ != TD_OK) {                                                                   \
            fprintf(stderr, "%s: %s\n", td_status_name(status_), td_last_error());                \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

/* A zeroed device tensor of `ndim` dims, contiguous. */
static td_tensor zeros(td_dtype dtype, int ndim, const int64_t *shape, void **keep) {
    size_t bytes = td_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) bytes *= (size_t)shape[i];
    void *data = NULL;
    if (hipMalloc(&data, bytes) || hipMemset(data, 0, bytes)) {
        fprintf(stderr, "hipMalloc/hipMemset of %zu bytes failed\n", bytes);
        exit(1);
    }
    *keep = data;
    return td_contiguous(data, dtype, ndim, shape);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PACKAGE_DIR PLAN_JSON\n", argv[0]);
        return 2;
    }
    td_package *package = NULL;
    td_plan *plan = NULL;
    CHECK(td_init(NULL)); /* dlopen("libamdhip64.so") */
    CHECK(td_package_open(argv[1], &package));
    CHECK(td_plan_load(package, argv[2], DEVICE, &plan));
    hipSetDevice(DEVICE);

    const int64_t q_shape[] = {B, S, HQ, D}, kv_shape[] = {B, S, HK, D}, lse_shape[] = {B, HQ, S}, one[] = {1};
    void *mem[12] = {0};
    td_arg args[] = {
        td_tensor_arg("q", zeros(TD_F16, 4, q_shape, &mem[0])),
        td_tensor_arg("k", zeros(TD_F16, 4, kv_shape, &mem[1])),
        td_tensor_arg("v", zeros(TD_F16, 4, kv_shape, &mem[2])),
        td_tensor_arg("out", zeros(TD_F16, 4, q_shape, &mem[3])),
        td_tensor_arg("do", zeros(TD_F16, 4, q_shape, &mem[4])),
        td_tensor_arg("lse", zeros(TD_F32, 3, lse_shape, &mem[5])),
        td_tensor_arg("dq", zeros(TD_F16, 4, q_shape, &mem[6])),
        td_tensor_arg("dk", zeros(TD_F16, 4, kv_shape, &mem[7])),
        td_tensor_arg("dv", zeros(TD_F16, 4, kv_shape, &mem[8])),
        /* batch mode: the sequence offsets are unused, one element each */
        td_tensor_arg("cu_seqlens_q", zeros(TD_I32, 1, one, &mem[9])),
        td_tensor_arg("cu_seqlens_k", zeros(TD_I32, 1, one, &mem[10])),
        td_f32_arg("scale", 0.08838834764831845f), /* 1 / sqrt(D) */
        td_f32_arg("softcap", 1.0f),                /* unused without a soft-cap */
    };
    /* One workspace for the plan; td_plan_run prepares it (host segment, zeroed regions) each run. */
    size_t ws_bytes = td_plan_workspace_size(plan);
    if (hipMalloc(&mem[11], ws_bytes)) {
        fprintf(stderr, "hipMalloc of the %zu-byte workspace failed\n", ws_bytes);
        return 1;
    }

    CHECK(td_plan_run_sized(plan, args, (int)(sizeof args / sizeof args[0]), mem[11], ws_bytes, NULL));
    hipDeviceSynchronize();
    printf("ran %d stages:", td_plan_num_stages(plan));
    for (int i = 0; i < td_plan_num_stages(plan); i++) printf(" %s", td_plan_stage_name(plan, i));
    printf("\n");

    for (int i = 0; i < 12; i++) hipFree(mem[i]);
    td_plan_free(plan);
    td_package_close(package);
    return 0;
}
