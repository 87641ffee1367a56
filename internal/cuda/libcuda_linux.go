//go:build linux && cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim_linux.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Open loads libcuda.so.1, initializes the driver and checks that a device
// is there. Without the library, or without a device, it fails with an
// error matching rdmamgr.ErrNotSupported that says which. It may be
// called again; the library is loaded once and never unloaded.
func Open() (Driver, error) {
	var cerr *C.char
	switch C.cu_open(&cerr) {
	case 0:
	case 1:
		return nil, NotSupported("libcuda.so.1 not found: %s", C.GoString(cerr))
	default:
		return nil, NotSupported("libcuda.so.1 lacks %s (driver too old)", C.GoString(cerr))
	}
	if err := check("cuInit", C.cu_init()); err != nil {
		if r, ok := err.(*Error); ok && r.Code == ErrorNoDevice {
			return nil, fmt.Errorf("cuda: no CUDA device: %w", err) // matches ErrNotSupported and ErrNoDevice
		}
		return nil, err
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.cu_device_count(&n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, NotSupported("no CUDA device")
	}
	return &libDriver{}, nil
}

func check(call string, r C.int) error { return Check(call, Result(r)) }

// libDriver is the real Driver. It holds no state of its own: the
// driver's handles are its own pointers, passed through as integers and
// turned back into pointers on the C side only.
type libDriver struct{}

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func (*libDriver) DeviceCount() (int, error) {
	var n C.int
	err := check("cuDeviceGetCount", C.cu_device_count(&n))
	return int(n), err
}

func (*libDriver) DeviceAttribute(dev int, a Attribute) (int, error) {
	var v C.int
	err := check("cuDeviceGetAttribute", C.cu_device_attribute(C.int(dev), C.int(a), &v))
	return int(v), err
}

func (*libDriver) PrimaryContext(dev int) (Context, error) {
	var c C.uintptr_t
	if err := check("cuDevicePrimaryCtxRetain", C.cu_primary_retain(C.int(dev), &c)); err != nil {
		return 0, err
	}
	return Context(c), nil
}

func (*libDriver) ReleasePrimaryContext(dev int) error {
	return check("cuDevicePrimaryCtxRelease", C.cu_primary_release(C.int(dev)))
}

func (*libDriver) MemAlloc(ctx Context, size uint64) (DevicePtr, error) {
	if size == 0 {
		return 0, Check("cuMemAlloc", ErrorInvalidValue)
	}
	var p C.uint64_t
	if err := check("cuMemAlloc", C.cu_mem_alloc(C.uintptr_t(ctx), C.uint64_t(size), &p)); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

func (*libDriver) MemFree(ctx Context, p DevicePtr) error {
	return check("cuMemFree", C.cu_mem_free(C.uintptr_t(ctx), C.uint64_t(p)))
}

func (*libDriver) HostAlloc(ctx Context, size uint64) ([]byte, error) {
	if size == 0 {
		return nil, Check("cuMemHostAlloc", ErrorInvalidValue)
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.cu_host_alloc(C.uintptr_t(ctx), C.uint64_t(size), &p)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), size), nil
}

func (*libDriver) HostFree(ctx Context, b []byte) error {
	return check("cuMemFreeHost", C.cu_host_free(C.uintptr_t(ctx), ptr(b)))
}

func (*libDriver) HostRegister(ctx Context, b []byte) error {
	if len(b) == 0 {
		return Check("cuMemHostRegister", ErrorInvalidValue)
	}
	return check("cuMemHostRegister", C.cu_host_register(C.uintptr_t(ctx), ptr(b), C.uint64_t(len(b))))
}

func (*libDriver) HostUnregister(ctx Context, b []byte) error {
	return check("cuMemHostUnregister", C.cu_host_unregister(C.uintptr_t(ctx), ptr(b)))
}

func (*libDriver) StreamCreate(ctx Context) (Stream, error) {
	var s C.uintptr_t
	if err := check("cuStreamCreate", C.cu_stream_create(C.uintptr_t(ctx), &s)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

func (*libDriver) StreamQuery(ctx Context, s Stream) (bool, error) {
	r := Result(C.cu_stream_query(C.uintptr_t(ctx), C.uintptr_t(s)))
	if r == ErrorNotReady {
		return false, nil
	}
	return r == Success, Check("cuStreamQuery", r)
}

func (*libDriver) StreamSynchronize(ctx Context, s Stream) error {
	return check("cuStreamSynchronize", C.cu_stream_sync(C.uintptr_t(ctx), C.uintptr_t(s)))
}

func (*libDriver) StreamDestroy(ctx Context, s Stream) error {
	return check("cuStreamDestroy", C.cu_stream_destroy(C.uintptr_t(ctx), C.uintptr_t(s)))
}

func (*libDriver) CopyHtoD(ctx Context, dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", C.cu_copy_htod(C.uintptr_t(ctx), C.uint64_t(dst), ptr(src), C.uint64_t(len(src)), C.uintptr_t(s)))
}

func (*libDriver) CopyDtoH(ctx Context, dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", C.cu_copy_dtoh(C.uintptr_t(ctx), ptr(dst), C.uint64_t(src), C.uint64_t(len(dst)), C.uintptr_t(s)))
}

func (*libDriver) CopyDtoD(ctx Context, dst, src DevicePtr, n uint64, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync", C.cu_copy_dtod(C.uintptr_t(ctx), C.uint64_t(dst), C.uint64_t(src), C.uint64_t(n), C.uintptr_t(s)))
}

func (*libDriver) MemsetAsync(ctx Context, dst DevicePtr, v byte, n uint64, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemsetD8Async", C.cu_memset_d8(C.uintptr_t(ctx), C.uint64_t(dst), C.uchar(v), C.uint64_t(n), C.uintptr_t(s)))
}

func (*libDriver) IPCGetMemHandle(ctx Context, p DevicePtr) (IPCHandle, error) {
	var h IPCHandle
	err := check("cuIpcGetMemHandle", C.cu_ipc_get(C.uintptr_t(ctx), C.uint64_t(p), unsafe.Pointer(&h[0])))
	return h, err
}

func (*libDriver) IPCOpenMemHandle(ctx Context, h IPCHandle) (DevicePtr, error) {
	var p C.uint64_t
	if err := check("cuIpcOpenMemHandle", C.cu_ipc_open(C.uintptr_t(ctx), unsafe.Pointer(&h[0]), &p)); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

func (*libDriver) IPCCloseMemHandle(ctx Context, p DevicePtr) error {
	return check("cuIpcCloseMemHandle", C.cu_ipc_close(C.uintptr_t(ctx), C.uint64_t(p)))
}

func (*libDriver) MemAddressRange(ctx Context, p DevicePtr) (DevicePtr, uint64, error) {
	var base, size C.uint64_t
	if err := check("cuMemGetAddressRange", C.cu_mem_range(C.uintptr_t(ctx), C.uint64_t(p), &base, &size)); err != nil {
		return 0, 0, err
	}
	return DevicePtr(base), uint64(size), nil
}

func (*libDriver) DmaBufFD(ctx Context, p DevicePtr, size uint64) (int, error) {
	if C.cu_has_dmabuf() == 0 {
		return -1, NotSupported("libcuda.so.1 lacks cuMemGetHandleForAddressRange (driver older than CUDA 11.7)")
	}
	fd := C.int(-1)
	if err := check("cuMemGetHandleForAddressRange", C.cu_dmabuf_fd(C.uintptr_t(ctx), C.uint64_t(p), C.uint64_t(size), &fd)); err != nil {
		return -1, err
	}
	return int(fd), nil
}

func (*libDriver) Close() error { return nil }
