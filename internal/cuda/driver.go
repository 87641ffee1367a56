package cuda

// DevicePtr is a device address (CUdeviceptr). Zero is never a valid
// allocation.
type DevicePtr uint64

// Context is a device's primary context, as a Driver hands it out. It is
// an opaque handle, valid until ReleasePrimaryContext; the real driver
// makes it current inside each call, so any goroutine on any thread may
// use it.
type Context uintptr

// Stream is an asynchronous queue of copies (CUstream), opaque, valid
// until StreamDestroy. Copies on one stream run in order; copies on
// different streams may overlap.
type Stream uintptr

// IPCHandle is a CUipcMemHandle: 64 opaque bytes naming a device
// allocation so another process on the same host can open it. It travels
// as bytes; the receiver must treat them as hostile (a wrong handle fails
// IPCOpenMemHandle, it never maps someone else's memory by itself, but
// the sender chooses which of its allocations to name).
type IPCHandle [64]byte

// Attribute is a device attribute the managers ask about.
type Attribute int

const (
	// AttrDmaBufSupported: the device can export a dma-buf fd of device
	// memory (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED), what ibverbs needs
	// to register it with ibv_reg_dmabuf_mr.
	AttrDmaBufSupported Attribute = 124
	// AttrUnifiedAddressing: one address space for host and device
	// (CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING).
	AttrUnifiedAddressing Attribute = 41
)

// Driver is the part of the CUDA driver API rdmamgr uses. Open returns the
// real one (libcuda.so.1 loaded at run time); package cudafake is an
// in-memory stand-in for tests. Every method is safe for concurrent use
// and fails with an error (an *Error, or one matching
// rdmamgr.ErrNotSupported), never a panic, on a bad handle or pointer.
//
// Host memory given to the asynchronous copies must stay valid and
// unmoved until the stream says the copy finished (StreamQuery true or
// StreamSynchronize nil): memory from HostAlloc, memory registered with
// HostRegister, or memory off the Go heap (a memreg memfd mapping). A Go
// heap slice must be pinned (runtime.Pinner) by the caller for as long.
type Driver interface {
	// DeviceCount returns the number of devices; ordinals are 0..n-1.
	DeviceCount() (int, error)
	// DeviceAttribute returns an integer attribute of a device.
	DeviceAttribute(dev int, a Attribute) (int, error)
	// PrimaryContext retains the device's primary context; each call is
	// paired with one ReleasePrimaryContext.
	PrimaryContext(dev int) (Context, error)
	// ReleasePrimaryContext releases one retain of the device's primary
	// context.
	ReleasePrimaryContext(dev int) error

	// MemAlloc allocates size bytes of device memory.
	MemAlloc(ctx Context, size uint64) (DevicePtr, error)
	// MemFree frees what MemAlloc returned.
	MemFree(ctx Context, p DevicePtr) error

	// HostAlloc allocates size bytes of pinned (page-locked, portable)
	// host memory, off the Go heap.
	HostAlloc(ctx Context, size uint64) ([]byte, error)
	// HostFree frees what HostAlloc returned (the same slice).
	HostFree(ctx Context, b []byte) error
	// HostRegister pins existing host memory (portable) so copies to and
	// from it run at full speed and asynchronously.
	HostRegister(ctx Context, b []byte) error
	// HostUnregister undoes HostRegister (the same slice).
	HostUnregister(ctx Context, b []byte) error

	// StreamCreate creates a non-blocking stream.
	StreamCreate(ctx Context) (Stream, error)
	// StreamQuery reports whether every copy queued on s finished; an
	// asynchronous failure of one of them is its error.
	StreamQuery(ctx Context, s Stream) (bool, error)
	// StreamSynchronize waits until every copy queued on s finished.
	StreamSynchronize(ctx Context, s Stream) error
	// StreamDestroy destroys s; copies already queued still finish.
	StreamDestroy(ctx Context, s Stream) error

	// CopyHtoD queues a copy of src to device memory at dst on s.
	CopyHtoD(ctx Context, dst DevicePtr, src []byte, s Stream) error
	// CopyDtoH queues a copy of len(dst) bytes at src into dst on s.
	CopyDtoH(ctx Context, dst []byte, src DevicePtr, s Stream) error
	// CopyDtoD queues a copy of n bytes from src to dst on s (either may
	// be memory opened through IPC).
	CopyDtoD(ctx Context, dst, src DevicePtr, n uint64, s Stream) error
	// MemsetAsync queues setting n bytes at dst to v on s.
	MemsetAsync(ctx Context, dst DevicePtr, v byte, n uint64, s Stream) error

	// IPCGetMemHandle names the allocation that starts at p for other
	// processes.
	IPCGetMemHandle(ctx Context, p DevicePtr) (IPCHandle, error)
	// IPCOpenMemHandle maps another process's allocation into this one
	// and returns its address here. A handle is opened once per process:
	// a second open fails (ErrAlreadyMapped in the stand-in); callers
	// cache the mapping.
	IPCOpenMemHandle(ctx Context, h IPCHandle) (DevicePtr, error)
	// IPCCloseMemHandle unmaps what IPCOpenMemHandle returned.
	IPCCloseMemHandle(ctx Context, p DevicePtr) error
	// MemAddressRange returns the base and size of the allocation that
	// holds p (cuMemGetAddressRange), memory opened through IPC included:
	// how a process checks what another one claims about a handle.
	MemAddressRange(ctx Context, p DevicePtr) (base DevicePtr, size uint64, err error)

	// DmaBufFD exports [p, p+size) as a dma-buf file descriptor
	// (cuMemGetHandleForAddressRange) for ibv_reg_dmabuf_mr; the caller
	// closes it. p and size must be page aligned. It fails with
	// rdmamgr.ErrNotSupported where the driver or the device cannot.
	DmaBufFD(ctx Context, p DevicePtr, size uint64) (int, error)

	// Close releases what the Driver itself holds; idempotent. It does not
	// free memory or streams the caller still holds.
	Close() error
}
