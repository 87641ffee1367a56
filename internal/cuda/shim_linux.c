//go:build linux && cgo

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "shim_linux.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef struct { char reserved[64]; } CUipcMemHandle;

enum {
	CU_MEMHOSTALLOC_PORTABLE = 1,
	CU_MEMHOSTREGISTER_PORTABLE = 1,
	CU_STREAM_NON_BLOCKING = 1,
	CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
	CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

static struct {
	CUresult (*Init)(unsigned int);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*PrimaryCtxRelease)(CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemHostAlloc)(void **, size_t, unsigned int);
	CUresult (*MemFreeHost)(void *);
	CUresult (*MemHostRegister)(void *, size_t, unsigned int);
	CUresult (*MemHostUnregister)(void *);
	CUresult (*StreamCreate)(CUstream *, unsigned int);
	CUresult (*StreamQuery)(CUstream);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned int);
	CUresult (*IpcCloseMemHandle)(CUdeviceptr);
	CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	// Optional (CUDA 11.7+): NULL when the driver is older.
	CUresult (*MemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);
} cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int open_rc;
static const char *open_err;

#define SYM(field, name) { (void **)&cu.field, name }

static void load(void) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		open_rc = 1;
		open_err = dlerror();
		return;
	}
	// The versioned names are the ones cuda.h maps the plain names to.
	struct { void **p; const char *name; } syms[] = {
		SYM(Init, "cuInit"),
		SYM(DeviceGetCount, "cuDeviceGetCount"),
		SYM(DeviceGet, "cuDeviceGet"),
		SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
		SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		SYM(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
		SYM(CtxSetCurrent, "cuCtxSetCurrent"),
		SYM(MemAlloc, "cuMemAlloc_v2"),
		SYM(MemFree, "cuMemFree_v2"),
		SYM(MemHostAlloc, "cuMemHostAlloc"),
		SYM(MemFreeHost, "cuMemFreeHost"),
		SYM(MemHostRegister, "cuMemHostRegister_v2"),
		SYM(MemHostUnregister, "cuMemHostUnregister"),
		SYM(StreamCreate, "cuStreamCreate"),
		SYM(StreamQuery, "cuStreamQuery"),
		SYM(StreamSynchronize, "cuStreamSynchronize"),
		SYM(StreamDestroy, "cuStreamDestroy_v2"),
		SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
		SYM(MemsetD8Async, "cuMemsetD8Async"),
		SYM(IpcGetMemHandle, "cuIpcGetMemHandle"),
		SYM(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
		SYM(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
		SYM(MemGetAddressRange, "cuMemGetAddressRange_v2"),
	};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		*syms[i].p = dlsym(lib, syms[i].name);
		if (!*syms[i].p) {
			open_rc = 2;
			open_err = syms[i].name;
			return; // the library stays loaded: never dlclose libcuda
		}
	}
	cu.MemGetHandleForAddressRange = dlsym(lib, "cuMemGetHandleForAddressRange");
}

int cu_open(const char **err) {
	pthread_once(&once, load);
	*err = open_err;
	return open_rc;
}

int cu_has_dmabuf(void) { return cu.MemGetHandleForAddressRange != NULL; }

int cu_init(void) { return cu.Init(0); }
int cu_device_count(int *n) { return cu.DeviceGetCount(n); }

int cu_device_attribute(int ord, int attr, int *v) {
	CUdevice dev;
	CUresult r = cu.DeviceGet(&dev, ord);
	return r ? r : cu.DeviceGetAttribute(v, attr, dev);
}

int cu_primary_retain(int ord, uintptr_t *ctx) {
	CUdevice dev;
	CUcontext c = NULL;
	CUresult r = cu.DeviceGet(&dev, ord);
	if (r) return r;
	r = cu.PrimaryCtxRetain(&c, dev);
	*ctx = (uintptr_t)c;
	return r;
}

int cu_primary_release(int ord) {
	CUdevice dev;
	CUresult r = cu.DeviceGet(&dev, ord);
	return r ? r : cu.PrimaryCtxRelease(dev);
}

#define CUR(ctx) do { CUresult r_ = cu.CtxSetCurrent((CUcontext)(ctx)); if (r_) return r_; } while (0)

int cu_mem_alloc(uintptr_t ctx, uint64_t size, uint64_t *p) {
	CUdeviceptr d = 0;
	CUR(ctx);
	CUresult r = cu.MemAlloc(&d, size);
	*p = d;
	return r;
}
int cu_mem_free(uintptr_t ctx, uint64_t p) { CUR(ctx); return cu.MemFree(p); }
int cu_host_alloc(uintptr_t ctx, uint64_t size, void **p) {
	CUR(ctx);
	return cu.MemHostAlloc(p, size, CU_MEMHOSTALLOC_PORTABLE);
}
int cu_host_free(uintptr_t ctx, void *p) { CUR(ctx); return cu.MemFreeHost(p); }
int cu_host_register(uintptr_t ctx, void *p, uint64_t size) {
	CUR(ctx);
	return cu.MemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE);
}
int cu_host_unregister(uintptr_t ctx, void *p) { CUR(ctx); return cu.MemHostUnregister(p); }

int cu_stream_create(uintptr_t ctx, uintptr_t *s) {
	CUstream st = NULL;
	CUR(ctx);
	CUresult r = cu.StreamCreate(&st, CU_STREAM_NON_BLOCKING);
	*s = (uintptr_t)st;
	return r;
}
int cu_stream_query(uintptr_t ctx, uintptr_t s) { CUR(ctx); return cu.StreamQuery((CUstream)s); }
int cu_stream_sync(uintptr_t ctx, uintptr_t s) { CUR(ctx); return cu.StreamSynchronize((CUstream)s); }
int cu_stream_destroy(uintptr_t ctx, uintptr_t s) { CUR(ctx); return cu.StreamDestroy((CUstream)s); }

int cu_copy_htod(uintptr_t ctx, uint64_t dst, const void *src, uint64_t n, uintptr_t s) {
	CUR(ctx);
	return cu.MemcpyHtoDAsync(dst, src, n, (CUstream)s);
}
int cu_copy_dtoh(uintptr_t ctx, void *dst, uint64_t src, uint64_t n, uintptr_t s) {
	CUR(ctx);
	return cu.MemcpyDtoHAsync(dst, src, n, (CUstream)s);
}
int cu_copy_dtod(uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t n, uintptr_t s) {
	CUR(ctx);
	return cu.MemcpyDtoDAsync(dst, src, n, (CUstream)s);
}

int cu_memset_d8(uintptr_t ctx, uint64_t dst, unsigned char v, uint64_t n, uintptr_t s) {
	CUR(ctx);
	return cu.MemsetD8Async(dst, v, n, (CUstream)s);
}

int cu_ipc_get(uintptr_t ctx, uint64_t p, void *handle64) {
	CUipcMemHandle h;
	CUR(ctx);
	CUresult r = cu.IpcGetMemHandle(&h, p);
	memcpy(handle64, &h, sizeof h);
	return r;
}
int cu_ipc_open(uintptr_t ctx, const void *handle64, uint64_t *p) {
	CUipcMemHandle h;
	CUdeviceptr d = 0;
	memcpy(&h, handle64, sizeof h);
	CUR(ctx);
	CUresult r = cu.IpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	*p = d;
	return r;
}
int cu_ipc_close(uintptr_t ctx, uint64_t p) { CUR(ctx); return cu.IpcCloseMemHandle(p); }
int cu_mem_range(uintptr_t ctx, uint64_t p, uint64_t *base, uint64_t *size) {
	CUdeviceptr b = 0;
	size_t n = 0;
	CUR(ctx);
	CUresult r = cu.MemGetAddressRange(&b, &n, p);
	*base = b;
	*size = n;
	return r;
}

int cu_dmabuf_fd(uintptr_t ctx, uint64_t p, uint64_t size, int *fd) {
	if (!cu.MemGetHandleForAddressRange) return CUDA_ERROR_NOT_SUPPORTED;
	CUR(ctx);
	return cu.MemGetHandleForAddressRange(fd, p, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
}
