// A mock libcuda.so.1 for TestMockDriver: the driver API symbols the shim
// resolves, with host memory as device memory and synchronous copies. Every
// call that needs a context fails with CUDA_ERROR_INVALID_CONTEXT unless
// the shim made the retained primary context current first, and flags the
// shim must pass are checked, so the test proves the shim's plumbing
// (symbol names, argument order, context, flags), not CUDA itself.
// MOCK_CUDA_NO_DEVICE=1 makes cuInit fail with CUDA_ERROR_NO_DEVICE.
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

static int primary; // the primary context's identity
static __thread void *current;
static int inited;

#define NEED_CTX do { if (current != &primary) return 201; } while (0)

int cuInit(unsigned int flags) {
	const char *e = getenv("MOCK_CUDA_NO_DEVICE");
	if (flags != 0) return 1;
	if (e && e[0] == '1') return 100;
	inited = 1;
	return 0;
}
int cuDeviceGetCount(int *n) { if (!inited) return 3; *n = 1; return 0; }
int cuDeviceGet(int *dev, int ord) { if (ord != 0) return 101; *dev = 1000 + ord; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {
	if (dev != 1000) return 101;
	*v = attr * 10;
	return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { if (dev != 1000) return 101; *ctx = &primary; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { return dev == 1000 ? 0 : 101; }
int cuCtxSetCurrent(void *ctx) { current = ctx; return 0; }

int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	NEED_CTX;
	void *m = malloc(n);
	if (!m) return 2;
	*p = (CUdeviceptr)m;
	return 0;
}
int cuMemFree_v2(CUdeviceptr p) { NEED_CTX; free((void *)p); return 0; }
int cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
	NEED_CTX;
	if (flags != 1) return 1;
	*p = calloc(1, n);
	return *p ? 0 : 2;
}
int cuMemFreeHost(void *p) { NEED_CTX; free(p); return 0; }
int cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) { NEED_CTX; return (p && n && flags == 1) ? 0 : 1; }
int cuMemHostUnregister(void *p) { NEED_CTX; return p ? 0 : 713; }

static int stream_tag;
int cuStreamCreate(void **s, unsigned int flags) { NEED_CTX; if (flags != 1) return 1; *s = &stream_tag; return 0; }
int cuStreamQuery(void *s) { NEED_CTX; return s == &stream_tag ? 0 : 400; }
int cuStreamSynchronize(void *s) { NEED_CTX; return s == &stream_tag ? 0 : 400; }
int cuStreamDestroy_v2(void *s) { NEED_CTX; return s == &stream_tag ? 0 : 400; }

int cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *st) {
	NEED_CTX;
	if (st != &stream_tag) return 400;
	memcpy((void *)d, s, n);
	return 0;
}
int cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *st) {
	NEED_CTX;
	if (st != &stream_tag) return 400;
	memcpy(d, (void *)s, n);
	return 0;
}
int cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) {
	NEED_CTX;
	if (st != &stream_tag) return 400;
	memmove((void *)d, (void *)s, n);
	return 0;
}
int cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *st) {
	NEED_CTX;
	if (st != &stream_tag) return 400;
	memset((void *)d, v, n);
	return 0;
}

int cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
	NEED_CTX;
	memset(h, 0x5a, sizeof *h);
	memcpy(h->reserved, &p, sizeof p);
	return 0;
}
int cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
	NEED_CTX;
	if (flags != 1 || (unsigned char)h.reserved[63] != 0x5a) return 1;
	memcpy(p, h.reserved, sizeof *p);
	return 0;
}
int cuIpcCloseMemHandle(CUdeviceptr p) { NEED_CTX; return p ? 0 : 1; }
// The mock keeps no sizes: every allocation is said to start at p and be 4 KiB.
int cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
	NEED_CTX;
	if (!p) return 1;
	*base = p;
	*size = 4096;
	return 0;
}

int cuMemGetHandleForAddressRange(void *fd, CUdeviceptr p, size_t n, int type, unsigned long long flags) {
	NEED_CTX;
	if (type != 1 || flags != 0 || !p || !n) return 1;
	*(int *)fd = 123;
	return 801; // as a device without dma-buf answers
}
