/* A stand-in for libamdhip64.so, for testing the HIP code path on machines without an AMD GPU.
 *
 * This is a test double, not a HIP implementation: real GPUs use ROCm's real library. It exports
 * the HIP C functions tiledsl calls, with their real signatures and error codes, so hip-python's
 * real bindings load it (it comes first when ROCM_PATH points at its directory) and every call
 * goes through them. "Device memory" is host memory in one arena; a kernel launch is forwarded to
 * a callback that the test harness registers (tests/hipstub/harness.py), which runs the real code
 * object on tiledsl's emulator over that same arena. The stub also counts what a leak or
 * wrong-device test needs: module loads and unloads, allocations and frees, and the device each
 * call went to (the current device is per thread, as in HIP).
 *
 * Build: python -m ziglang cc -shared -fPIC -O1 libamdhip64.c -o lib/libamdhip64.so
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int hipError_t;
enum {
    hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2, hipErrorInvalidConfiguration = 9,
    hipErrorInvalidDevicePointer = 17, hipErrorInvalidMemcpyDirection = 21, hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101, hipErrorInvalidImage = 200, hipErrorNoBinaryForGpu = 209,
    hipErrorInvalidHandle = 400, hipErrorNotFound = 500, hipErrorIllegalAddress = 700,
    hipErrorLaunchFailure = 719, hipErrorNotSupported = 801,
};

/* hipDeviceProp_tR0600, field for field as in hip_runtime_api.h (the layout hip-python reads). */
typedef struct { unsigned int bits; } hipDeviceArch_t; /* 21 one-bit flags in one unsigned int */
typedef struct {
    char name[256];
    char uuid[16];
    char luid[8];
    unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem, sharedMemPerBlock;
    int regsPerBlock, warpSize;
    size_t memPitch;
    int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
    size_t totalConstMem;
    int major, minor;
    size_t textureAlignment, texturePitchAlignment;
    int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory,
        computeMode, maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2],
        maxTexture2DMipmap[2], maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3],
        maxTexture3DAlt[3], maxTextureCubemap, maxTexture1DLayered[2], maxTexture2DLayered[3],
        maxTextureCubemapLayered[2], maxSurface1D, maxSurface2D[2], maxSurface3D[3],
        maxSurface1DLayered[2], maxSurface2DLayered[3], maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
    size_t surfaceAlignment;
    int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount,
        unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize,
        maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported,
        localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID,
        hostNativeAtomicSupported, singleToDoublePrecisionPerfRatio, pageableMemoryAccess,
        concurrentManagedAccess, computePreemptionSupported, canUseHostPointerForRegisteredMem,
        cooperativeLaunch, cooperativeMultiDeviceLaunch;
    size_t sharedMemPerBlockOptin;
    int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor,
        accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock;
    int hostRegisterSupported, sparseHipArraySupported, hostRegisterReadOnlySupported,
        timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
    unsigned int gpuDirectRDMAFlushWritesOptions;
    int gpuDirectRDMAWritesOrdering;
    unsigned int memoryPoolSupportedHandleTypes;
    int deferredMappingHipArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers,
        reserved[63], hipReserved[32];
    char gcnArchName[256];
    size_t maxSharedMemoryPerMultiProcessor;
    int clockInstructionRate;
    hipDeviceArch_t arch;
    unsigned int *hdpMemFlushCntl, *hdpRegFlushCntl;
    int cooperativeMultiDeviceUnmatchedFunc, cooperativeMultiDeviceUnmatchedGridDim,
        cooperativeMultiDeviceUnmatchedBlockDim, cooperativeMultiDeviceUnmatchedSharedMem, isLargeBar,
        asicRevision;
} hipDeviceProp_tR0600;

/* ---- state -------------------------------------------------------------------------------- */
#define MAX_DEVICES 8
#define MAX_ALLOCS 65536
#define ARENA_BYTES (8ull << 30) /* reserved, not committed (MAP_NORESERVE) */
#define ALIGN 256ull

typedef struct { char gcn[64]; char name[128]; int warp, lds, cus, mach; } Device;
enum { KIND_BUFFER = 0, KIND_CODE = 1, KIND_RUNTIME = 2 };
typedef struct { uint64_t addr, size; int device, kind; } Alloc;
typedef struct Module { int device; unsigned char *image; size_t image_size; uint64_t code_base; int live; } Module;
typedef struct Function { Module *module; char name[256]; } Function;
typedef struct Stream { int device; } Stream;
typedef int (*launch_fn)(int device, const void *image, size_t image_size, uint64_t code_base, const char *name,
                         const unsigned *dims, unsigned shared_mem, const void *args, size_t args_size);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Device devices[MAX_DEVICES];
static int ndevices;
static unsigned char *arena;
static Alloc allocs[MAX_ALLOCS];
static int nallocs;
static launch_fn on_launch;
static __thread int current_device;
static char message[4096];
static long counts[8];
enum { C_MALLOC, C_FREE, C_LOAD, C_UNLOAD, C_LAUNCH, C_SETDEVICE, C_SYNC, C_FUNCTION };
static const char *count_names[] = {"mallocs", "frees", "module_loads", "module_unloads", "launches",
                                    "set_device", "synchronizes", "get_functions"};
#define MAX_LOG 4096
static int launch_log[MAX_LOG]; /* the device of each launch, in order */
static int nlaunch_log;

/* ---- the harness's interface ---------------------------------------------------------------- */
int tdstub_add_device(const char *gcn, const char *name, int warp, int lds, int cus, int mach) {
    if (ndevices == MAX_DEVICES) return -1;
    Device *d = &devices[ndevices];
    snprintf(d->gcn, sizeof d->gcn, "%s", gcn);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->warp = warp; d->lds = lds; d->cus = cus; d->mach = mach;
    return ndevices++;
}
void tdstub_set_launch_callback(launch_fn fn) { on_launch = fn; }
void tdstub_set_message(const char *text) { snprintf(message, sizeof message, "%s", text); }
const char *tdstub_message(void) { return message; }
uint64_t tdstub_arena_base(void) { return (uint64_t)(uintptr_t)arena; }
uint64_t tdstub_arena_size(void) { return ARENA_BYTES; }
size_t tdstub_sizeof_props(void) { return sizeof(hipDeviceProp_tR0600); }

long tdstub_count(const char *what) {
    if (!strcmp(what, "live_allocations") || !strcmp(what, "live_modules")) {
        int kind = what[5] == 'a' ? KIND_BUFFER : KIND_CODE;
        long n = 0;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < nallocs; i++) n += allocs[i].kind == kind;
        pthread_mutex_unlock(&lock);
        return n;
    }
    for (int i = 0; i < 8; i++)
        if (!strcmp(what, count_names[i])) return counts[i];
    return -1;
}

/* The launch log: copies up to `max` launch devices into `out`, returns how many launches so far. */
int tdstub_launch_devices(int *out, int max) {
    int n = nlaunch_log < max ? nlaunch_log : max;
    memcpy(out, launch_log, n * sizeof(int));
    return nlaunch_log;
}

/* The live allocations of `device` (all kinds), as (addr, size) pairs; returns the count. */
int tdstub_allocations(int device, uint64_t *out, int max) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].device == device) {
            if (n < max) { out[2 * n] = allocs[i].addr; out[2 * n + 1] = allocs[i].size; }
            n++;
        }
    pthread_mutex_unlock(&lock);
    return n;
}

int tdstub_allocation_device(uint64_t addr) {
    int dev = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].addr == addr) dev = allocs[i].device;
    pthread_mutex_unlock(&lock);
    return dev;
}

/* ---- the arena allocator (first fit over a sorted table; freed space is reused) ------------- */
static int arena_init(void) {
    if (arena) return 0;
    void *p = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    arena = p;
    return 0;
}

static uint64_t arena_alloc(uint64_t size, int device, int kind) {
    uint64_t padded = ((size ? size : 1) + ALIGN - 1) / ALIGN * ALIGN;
    uint64_t base = (uint64_t)(uintptr_t)arena, addr = base;
    int at = 0;
    pthread_mutex_lock(&lock);
    if (nallocs == MAX_ALLOCS) { pthread_mutex_unlock(&lock); return 0; }
    for (; at < nallocs; at++) { /* first hole that fits, in address order */
        if (allocs[at].addr - addr >= padded) break;
        addr = allocs[at].addr + (allocs[at].size + ALIGN - 1) / ALIGN * ALIGN;
    }
    if (addr + padded > base + ARENA_BYTES) { pthread_mutex_unlock(&lock); return 0; }
    memmove(&allocs[at + 1], &allocs[at], (nallocs - at) * sizeof(Alloc));
    allocs[at] = (Alloc){addr, size, device, kind};
    nallocs++;
    pthread_mutex_unlock(&lock);
    memset((void *)(uintptr_t)addr, 0, padded);
    return addr;
}

static int arena_free(uint64_t addr, int kind) {
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].addr == addr && allocs[i].kind == kind) {
            memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof(Alloc));
            nallocs--;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

/* True when [addr, addr + size) lies inside one live buffer allocation. */
static int in_buffer(const void *p, size_t size) {
    uint64_t a = (uint64_t)(uintptr_t)p;
    int ok = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].kind == KIND_BUFFER && allocs[i].addr <= a && a + size <= allocs[i].addr + allocs[i].size)
            ok = 1;
    pthread_mutex_unlock(&lock);
    return ok;
}

uint64_t tdstub_runtime_alloc(int device, uint64_t size) { return arena_init() ? 0 : arena_alloc(size, device, KIND_RUNTIME); }
int tdstub_runtime_free(uint64_t addr) { return arena_free(addr, KIND_RUNTIME); }

/* ---- HIP: errors and versions --------------------------------------------------------------- */
const char *hipGetErrorName(hipError_t e) {
    switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorInvalidConfiguration: return "hipErrorInvalidConfiguration";
    case hipErrorInvalidDevicePointer: return "hipErrorInvalidDevicePointer";
    case hipErrorInvalidMemcpyDirection: return "hipErrorInvalidMemcpyDirection";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidImage: return "hipErrorInvalidImage";
    case hipErrorNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorIllegalAddress: return "hipErrorIllegalAddress";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
    }
}

const char *hipGetErrorString(hipError_t e) {
    switch (e) {
    case hipSuccess: return "no error";
    case hipErrorInvalidValue: return "invalid argument";
    case hipErrorOutOfMemory: return "out of memory";
    case hipErrorNoDevice: return "no ROCm-capable device is detected";
    case hipErrorInvalidDevice: return "invalid device ordinal";
    case hipErrorInvalidImage: return "device kernel image is invalid";
    case hipErrorNoBinaryForGpu: return "no kernel image is available for execution on the device";
    case hipErrorNotFound: return "named symbol not found";
    case hipErrorIllegalAddress: return "an illegal memory access was encountered";
    case hipErrorLaunchFailure: return "unspecified launch failure";
    default: return hipGetErrorName(e);
    }
}

hipError_t hipRuntimeGetVersion(int *v) { if (!v) return hipErrorInvalidValue; *v = 70000000; return hipSuccess; }
hipError_t hipDriverGetVersion(int *v) { if (!v) return hipErrorInvalidValue; *v = 70000000; return hipSuccess; }

/* ---- HIP: devices --------------------------------------------------------------------------- */
hipError_t hipGetDeviceCount(int *count) {
    if (!count) return hipErrorInvalidValue;
    *count = ndevices;
    return ndevices ? hipSuccess : hipErrorNoDevice;
}

hipError_t hipSetDevice(int device) {
    counts[C_SETDEVICE]++;
    if (device < 0 || device >= ndevices) return hipErrorInvalidDevice;
    current_device = device;
    return hipSuccess;
}

hipError_t hipGetDevice(int *device) {
    if (!device) return hipErrorInvalidValue;
    if (!ndevices) return hipErrorNoDevice;
    *device = current_device;
    return hipSuccess;
}

hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600 *p, int device) {
    if (!p) return hipErrorInvalidValue;
    if (device < 0 || device >= ndevices) return hipErrorInvalidDevice;
    Device *d = &devices[device];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", d->name);
    snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", d->gcn);
    p->totalGlobalMem = ARENA_BYTES;
    p->sharedMemPerBlock = p->maxSharedMemoryPerMultiProcessor = p->sharedMemPerMultiprocessor = d->lds;
    p->warpSize = d->warp;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->multiProcessorCount = d->cus;
    p->asicRevision = 1; /* the last field: lets a test check the layout end to end */
    return hipSuccess;
}

/* ---- HIP: memory ---------------------------------------------------------------------------- */
hipError_t hipMalloc(void **ptr, size_t size) {
    if (!ptr) return hipErrorInvalidValue;
    if (!ndevices) return hipErrorNoDevice;
    if (arena_init()) return hipErrorOutOfMemory;
    if (size > ARENA_BYTES) return hipErrorOutOfMemory;
    uint64_t addr = arena_alloc(size, current_device, KIND_BUFFER);
    if (!addr) return hipErrorOutOfMemory;
    counts[C_MALLOC]++;
    *ptr = (void *)(uintptr_t)addr;
    return hipSuccess;
}

hipError_t hipFree(void *ptr) {
    if (!ptr) return hipSuccess;
    if (!arena_free((uint64_t)(uintptr_t)ptr, KIND_BUFFER)) return hipErrorInvalidValue;
    counts[C_FREE]++;
    return hipSuccess;
}

hipError_t hipMemcpy(void *dst, const void *src, size_t size, int kind) {
    if (size == 0) return hipSuccess;
    if (!dst || !src) return hipErrorInvalidValue;
    int dst_dev = kind == 1 || kind == 3, src_dev = kind == 2 || kind == 3;
    if (kind < 0 || kind > 4) return hipErrorInvalidMemcpyDirection;
    if (kind == 4) { dst_dev = in_buffer(dst, size); src_dev = in_buffer(src, size); }
    if ((dst_dev && !in_buffer(dst, size)) || (src_dev && !in_buffer(src, size))) return hipErrorInvalidValue;
    memmove(dst, src, size);
    return hipSuccess;
}

hipError_t hipMemset(void *dst, int value, size_t size) {
    if (size && !in_buffer(dst, size)) return hipErrorInvalidValue;
    memset(dst, value, size);
    return hipSuccess;
}

hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total) {
    if (!free_bytes || !total) return hipErrorInvalidValue;
    *total = ARENA_BYTES;
    uint64_t used = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++) used += allocs[i].size;
    pthread_mutex_unlock(&lock);
    *free_bytes = ARENA_BYTES - used;
    return hipSuccess;
}

/* ---- HIP: modules --------------------------------------------------------------------------- */
static uint16_t rd16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

hipError_t hipModuleLoadData(Module **module, const void *image) {
    const unsigned char *e = image;
    if (!module || !image) return hipErrorInvalidValue;
    if (!ndevices) return hipErrorNoDevice;
    if (memcmp(e, "\177ELF", 4) || e[4] != 2 || rd16(e + 18) != 224) return hipErrorInvalidImage;
    if ((rd32(e + 48) & 0xff) != (uint32_t)devices[current_device].mach) return hipErrorNoBinaryForGpu;
    uint64_t phoff = rd64(e + 32), shoff = rd64(e + 40);
    uint16_t phentsize = rd16(e + 54), phnum = rd16(e + 56), shentsize = rd16(e + 58), shnum = rd16(e + 60);
    size_t size = shoff + (size_t)shnum * shentsize, extent = 0;
    for (int i = 0; i < phnum; i++) {
        const unsigned char *ph = e + phoff + (size_t)i * phentsize;
        if (rd32(ph) != 1) continue; /* PT_LOAD */
        uint64_t off = rd64(ph + 8), vaddr = rd64(ph + 16), filesz = rd64(ph + 32), memsz = rd64(ph + 40);
        if (off + filesz > size) size = off + filesz;
        if (vaddr + memsz > extent) extent = vaddr + memsz;
    }
    if (arena_init()) return hipErrorOutOfMemory;
    uint64_t base = arena_alloc(extent ? extent : 4, current_device, KIND_CODE);
    if (!base) return hipErrorOutOfMemory;
    for (int i = 0; i < phnum; i++) { /* map the loadable segments, as the runtime's loader does */
        const unsigned char *ph = e + phoff + (size_t)i * phentsize;
        if (rd32(ph) == 1) memcpy((void *)(uintptr_t)(base + rd64(ph + 16)), e + rd64(ph + 8), rd64(ph + 32));
    }
    Module *m = calloc(1, sizeof *m);
    m->device = current_device;
    m->image = malloc(size);
    memcpy(m->image, image, size);
    m->image_size = size;
    m->code_base = base;
    m->live = 1;
    counts[C_LOAD]++;
    *module = m;
    return hipSuccess;
}

hipError_t hipModuleUnload(Module *m) {
    if (!m || !m->live) return hipErrorInvalidHandle;
    arena_free(m->code_base, KIND_CODE);
    free(m->image);
    m->image = NULL;
    m->live = 0; /* the handle is dead; its Functions stay allocated so a stale launch is caught */
    counts[C_UNLOAD]++;
    return hipSuccess;
}

/* True when the code object's symbol table has `name`. */
static int has_symbol(const Module *m, const char *name) {
    const unsigned char *e = m->image;
    uint64_t shoff = rd64(e + 40);
    uint16_t shentsize = rd16(e + 58), shnum = rd16(e + 60);
    for (int i = 0; i < shnum; i++) {
        const unsigned char *sh = e + shoff + (size_t)i * shentsize;
        if (rd32(sh + 4) != 2 && rd32(sh + 4) != 11) continue; /* SHT_SYMTAB, SHT_DYNSYM */
        const unsigned char *strsh = e + shoff + (size_t)rd32(sh + 40) * shentsize;
        const char *strtab = (const char *)e + rd64(strsh + 24);
        uint64_t off = rd64(sh + 24), size = rd64(sh + 32), entsize = rd64(sh + 56);
        for (uint64_t s = 0; entsize && s < size / entsize; s++)
            if (!strcmp(strtab + rd32(e + off + s * entsize), name)) return 1;
    }
    return 0;
}

hipError_t hipModuleGetFunction(Function **fn, Module *m, const char *name) {
    if (!fn || !m || !name) return hipErrorInvalidValue;
    if (!m->live) return hipErrorInvalidHandle;
    char kd[300];
    snprintf(kd, sizeof kd, "%s.kd", name);
    if (!has_symbol(m, kd)) return hipErrorNotFound;
    Function *f = calloc(1, sizeof *f);
    f->module = m;
    snprintf(f->name, sizeof f->name, "%s", name);
    counts[C_FUNCTION]++;
    *fn = f;
    return hipSuccess;
}

/* ---- HIP: launch and streams ---------------------------------------------------------------- */
hipError_t hipModuleLaunchKernel(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shared_mem, Stream *stream, void **params, void **extra) {
    if (!f) return hipErrorInvalidHandle;
    if (!f->module->live) return hipErrorInvalidHandle;
    int device = stream ? stream->device : current_device;
    if (f->module->device != device) return hipErrorInvalidDevice; /* the module lives on another GPU */
    if (!gx || !gy || !gz || !bx || !by || !bz) return hipErrorInvalidValue;
    if ((uint64_t)bx * by * bz > 1024) return hipErrorInvalidValue;
    if (gy > 65535 || gz > 65535) return hipErrorInvalidValue;
    if ((uint64_t)gx * bx > 0xffffffffull) return hipErrorInvalidValue;
    if (params) return hipErrorNotSupported; /* this stand-in takes arguments through `extra` only */
    const void *args = NULL;
    size_t args_size = 0;
    for (int i = 0; extra && extra[i] != (void *)3; i += 2) { /* HIP_LAUNCH_PARAM_END */
        if (extra[i] == (void *)1) args = extra[i + 1];
        else if (extra[i] == (void *)2) args_size = *(size_t *)extra[i + 1];
        else return hipErrorInvalidValue;
    }
    if (args_size && !args) return hipErrorInvalidValue;
    if (!on_launch) { tdstub_set_message("no launch callback registered"); return hipErrorLaunchFailure; }
    unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    counts[C_LAUNCH]++;
    if (nlaunch_log < MAX_LOG) launch_log[nlaunch_log++] = device;
    return on_launch(device, f->module->image, f->module->image_size, f->module->code_base, f->name, dims,
                     shared_mem, args, args_size);
}

hipError_t hipDeviceSynchronize(void) { counts[C_SYNC]++; return ndevices ? hipSuccess : hipErrorNoDevice; }

hipError_t hipStreamCreate(Stream **stream) {
    if (!stream) return hipErrorInvalidValue;
    if (!ndevices) return hipErrorNoDevice;
    Stream *s = calloc(1, sizeof *s);
    s->device = current_device;
    *stream = s;
    return hipSuccess;
}

hipError_t hipStreamDestroy(Stream *stream) {
    if (!stream) return hipErrorInvalidHandle;
    free(stream);
    return hipSuccess;
}

hipError_t hipStreamSynchronize(Stream *stream) { counts[C_SYNC]++; (void)stream; return hipSuccess; }
