//go:build linux && cgo

// The CUDA driver API functions rdmamgr uses, declared here (no CUDA
// headers, no toolkit): loaded from libcuda.so.1 at run time. Each helper
// makes the context current and makes the call in one cgo call, so the
// context never depends on which OS thread a goroutine runs on.
#ifndef RDMAMGR_CUDA_SHIM_H
#define RDMAMGR_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

// cu_open loads libcuda.so.1 and resolves the symbols. It returns 0, or 1
// with *err naming the library's dlerror, or 2 with *err naming the first
// missing required symbol. Idempotent.
int cu_open(const char **err);
// cu_has_dmabuf says whether the driver has cuMemGetHandleForAddressRange.
int cu_has_dmabuf(void);

int cu_init(void);
int cu_device_count(int *n);
int cu_device_attribute(int dev, int attr, int *v);
int cu_primary_retain(int dev, uintptr_t *ctx);
int cu_primary_release(int dev);

int cu_mem_alloc(uintptr_t ctx, uint64_t size, uint64_t *p);
int cu_mem_free(uintptr_t ctx, uint64_t p);
int cu_host_alloc(uintptr_t ctx, uint64_t size, void **p);
int cu_host_free(uintptr_t ctx, void *p);
int cu_host_register(uintptr_t ctx, void *p, uint64_t size);
int cu_host_unregister(uintptr_t ctx, void *p);

int cu_stream_create(uintptr_t ctx, uintptr_t *s);
int cu_stream_query(uintptr_t ctx, uintptr_t s);
int cu_stream_sync(uintptr_t ctx, uintptr_t s);
int cu_stream_destroy(uintptr_t ctx, uintptr_t s);

int cu_copy_htod(uintptr_t ctx, uint64_t dst, const void *src, uint64_t n, uintptr_t s);
int cu_copy_dtoh(uintptr_t ctx, void *dst, uint64_t src, uint64_t n, uintptr_t s);
int cu_copy_dtod(uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t n, uintptr_t s);

int cu_memset_d8(uintptr_t ctx, uint64_t dst, unsigned char v, uint64_t n, uintptr_t s);

int cu_ipc_get(uintptr_t ctx, uint64_t p, void *handle64);
int cu_ipc_open(uintptr_t ctx, const void *handle64, uint64_t *p);
int cu_ipc_close(uintptr_t ctx, uint64_t p);
int cu_mem_range(uintptr_t ctx, uint64_t p, uint64_t *base, uint64_t *size);

int cu_dmabuf_fd(uintptr_t ctx, uint64_t p, uint64_t size, int *fd);

#endif
