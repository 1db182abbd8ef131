/* Errors, dtypes, files, and the HIP runtime loaded with dlopen. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- errors --------------------------------------------------------------------------------- */
#define MESSAGE_BYTES 4096
static _Thread_local char message[MESSAGE_BYTES];

const char *td_last_error(void) { return message; }

td_status td__fail(td_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return status;
}

td_status td__context(td_status status, const char *fmt, ...) {
    char prefix[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Shift the message right to make room for "prefix: " (its tail is cut if it gets too long). */
    size_t plen = strlen(prefix), mlen = strlen(message);
    if (plen + 2 + mlen >= sizeof message) mlen = sizeof message - 1 - plen - 2;
    memmove(message + plen + 2, message, mlen);
    message[plen + 2 + mlen] = 0;
    memcpy(message, prefix, plen);
    message[plen] = ':';
    message[plen + 1] = ' ';
    return status;
}

const char *td_status_name(td_status status) {
    switch (status) {
    case TD_OK: return "TD_OK";
    case TD_ERROR_ARGUMENT: return "TD_ERROR_ARGUMENT";
    case TD_ERROR_NOT_FOUND: return "TD_ERROR_NOT_FOUND";
    case TD_ERROR_PACKAGE: return "TD_ERROR_PACKAGE";
    case TD_ERROR_HIP: return "TD_ERROR_HIP";
    case TD_ERROR_STATE: return "TD_ERROR_STATE";
    case TD_ERROR_MEMORY: return "TD_ERROR_MEMORY";
    }
    return "TD_ERROR_UNKNOWN";
}

/* ---- dtypes --------------------------------------------------------------------------------- */
static const struct { const char *name; size_t size; } DTYPES[] = {
    [TD_F32] = {"f32", 4}, [TD_F16] = {"f16", 2}, [TD_BF16] = {"bf16", 2}, [TD_I32] = {"i32", 4},
    [TD_I64] = {"i64", 8}, [TD_I1] = {"i1", 1}, [TD_F8E4M3] = {"f8e4m3", 1}, [TD_F8E5M2] = {"f8e5m2", 1},
};
#define NDTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

size_t td_dtype_size(td_dtype dtype) { return (int)dtype > 0 && (int)dtype < NDTYPES ? DTYPES[dtype].size : 0; }

const char *td__dtype_name(td_dtype dtype) {
    return (int)dtype > 0 && (int)dtype < NDTYPES ? DTYPES[dtype].name : "an unknown dtype";
}

td_dtype td__dtype_from_name(const char *name) {
    for (int i = 1; name && i < NDTYPES; i++)
        if (!strcmp(DTYPES[i].name, name)) return (td_dtype)i;
    return (td_dtype)0;
}

int td__hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* ---- files ---------------------------------------------------------------------------------- */
td_status td__read_file(const char *path, const char *what, char **data, size_t *size) {
    /* Only a regular file of a plausible size: a FIFO would block, /dev/zero never end. */
    struct stat st;
    if (stat(path, &st) == 0 && (!S_ISREG(st.st_mode) || st.st_size > ((off_t)1 << 30)))
        return td__fail(TD_ERROR_PACKAGE, "cannot read the %s %s (%s)", what, path,
                        S_ISREG(st.st_mode) ? "larger than 1 GiB" : "not a regular file");
    FILE *f = fopen(path, "rb");
    if (!f) return td__fail(errno == ENOENT ? TD_ERROR_NOT_FOUND : TD_ERROR_PACKAGE, "cannot read the %s %s (%s)",
                            what, path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) { free(buf); buf = NULL; break; }
        buf = bigger;
        cap *= 2;
    }
    int failed = ferror(f);
    fclose(f);
    if (!buf) return td__fail(TD_ERROR_MEMORY, "out of memory reading the %s %s", what, path);
    if (failed) { free(buf); return td__fail(TD_ERROR_PACKAGE, "cannot read the %s %s (read error)", what, path); }
    buf[n] = 0; /* JSON readers may treat it as a string */
    *data = buf;
    *size = n;
    return TD_OK;
}

/* ---- HIP ------------------------------------------------------------------------------------ */
td_hip_api td__hip;
static void *hip_handle;
static char hip_name[1024];
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

td_status td__need_init(void) {
    if (!hip_handle) return td__fail(TD_ERROR_STATE, "the runtime is not initialized: call td_init first");
    return TD_OK;
}

td_status td__hip_check(hipError_t err, const char *what) {
    if (err == 0) return TD_OK;
    const char *name = td__hip.GetErrorName ? td__hip.GetErrorName(err) : NULL;
    return td__fail(TD_ERROR_HIP, "%s failed: %s (%d)", what, name ? name : "unknown HIP error", err);
}

td_status td__set_device(int device) {
    char what[64];
    snprintf(what, sizeof what, "hipSetDevice(%d)", device);
    return td__hip_check(td__hip.SetDevice(device), what);
}

td_status td_init(const char *hip_library) {
    const char *name = hip_library ? hip_library : "libamdhip64.so";
    td_status status = TD_OK;
    pthread_mutex_lock(&init_lock);
    if (hip_handle) {
        if (hip_library && strcmp(hip_name, name))
            status = td__fail(TD_ERROR_STATE, "td_init: the runtime already uses the HIP library %s, not %s", hip_name,
                              name);
        pthread_mutex_unlock(&init_lock);
        return status;
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        pthread_mutex_unlock(&init_lock);
        return td__fail(TD_ERROR_HIP, "td_init: cannot load the HIP runtime %s: %s", name, why ? why : "dlopen failed");
    }
    /* Every function the runtime calls, each from its exported C name. */
    static const char *names[] = {"hipGetErrorName", "hipSetDevice", "hipMalloc", "hipFree", "hipMemcpy",
                                  "hipMemset", "hipModuleLoadData", "hipModuleUnload", "hipModuleGetFunction",
                                  "hipModuleLaunchKernel"};
    void *fns[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fns[i] = dlsym(h, names[i]);
        if (!fns[i]) {
            dlclose(h);
            pthread_mutex_unlock(&init_lock);
            return td__fail(TD_ERROR_HIP, "td_init: %s does not export %s; is it a HIP runtime?", name, names[i]);
        }
    }
    /* dlsym returns data pointers; POSIX guarantees they convert to function pointers, and
     * memcpy says so without a cast the C standard leaves undefined. */
    void **slots[] = {(void **)&td__hip.GetErrorName, (void **)&td__hip.SetDevice, (void **)&td__hip.Malloc,
                      (void **)&td__hip.Free, (void **)&td__hip.Memcpy, (void **)&td__hip.Memset,
                      (void **)&td__hip.ModuleLoadData, (void **)&td__hip.ModuleUnload,
                      (void **)&td__hip.ModuleGetFunction, (void **)&td__hip.ModuleLaunchKernel};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) memcpy(slots[i], &fns[i], sizeof fns[i]);
    snprintf(hip_name, sizeof hip_name, "%s", name);
    hip_handle = h;
    pthread_mutex_unlock(&init_lock);
    return TD_OK;
}
