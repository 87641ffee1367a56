// Package cuda is rdmamgr's fence around the CUDA driver API: the few
// calls the GPU paths need, behind the Driver interface, with CUresults
// mapped to Go errors (errors.go: an *Error per failed call, matching
// ErrDriver and its code's sentinel; a missing driver or device, and a
// call the machine cannot do, match rdmamgr.ErrNotSupported; out of
// memory, device or pinned, matches rdmamgr.ErrLimit, as the registry's
// caps, so a remote RequestBuffer caller can branch on it).
//
// Open loads libcuda.so.1 at run time (dlopen/dlsym through cgo, the
// functions declared in shim_linux.h: no CUDA headers, no toolkit; only
// libdl is linked). Off Linux or without cgo, Open fails with
// ErrNotSupported (libcuda_other.go), so every build works everywhere and a
// machine without a GPU runs everything else. The real driver makes the
// context current inside each C helper, so a Context is usable from any
// goroutine. Package cudafake is an in-memory stand-in with the same
// contract, for tests of everything above the driver.
//
// Pool (pool.go) pools one device's memory over any Driver: 4 KiB-1 MiB
// power-of-two slots of 2 MiB slabs, zeroed before reuse, two empty slabs
// kept as spares (cuMemFree synchronizes the device); a block that will be
// exported through IPC gets an allocation of its own (Block.Own), since a
// handle names the whole allocation, and it is freed, never reused.
//
// Stager (stage.go) moves device memory through two pinned host buffers
// in a pipeline for a path that moves host bytes (TCP): while the caller
// writes one chunk to a socket the next chunk's device-to-host copy runs,
// and while it reads one chunk from a socket the previous chunk's copy to
// the device runs; nothing is in flight when it returns, errors included.
// Stagers reuses them per context: 0 allocations per operation; it bounds
// the pinned memory (at most maxOut out, a Get past it waits a bounded
// time then fails with rdmamgr.ErrLimit; at most maxIdle kept idle per
// context, the rest freed when put back; a Stager whose copy or stream
// failed, Broken, is freed too, never reused: its stream may hold a sticky
// error).
//
// What is built (issue 27): the interface, the real driver, the stand-in,
// the pool and the stager, all tested without a GPU: TestMockDriver runs
// the real cgo path (dlopen, the symbol names the shim asks for, argument order, context,
// flags) against testdata/mockcuda.c built as libcuda.so.1; TestOpen runs
// a round trip on a real GPU where one exists (it passed on an H100,
// 2026-11-27, with test/gpu's cross-process suite).
// Users: memreg's device regions (RequestBuffer with actor.WithDevice,
// handles with a Location), the TCP server's staging (backend/tcp
// stage.go), shm's CUDA IPC (the owner exports an own allocation's
// handle, memreg's Ref.ExportIPC; the initiator opens it once per route,
// checks its extent with MemAddressRange and stages copies with a
// Stager: backend/shm device.go), node.Config.CUDA, serve --cuda and bench --memory.
//
// Package queuepair stages the initiator's own device memory (a Put's
// source, a Get's destination) through pinned buffers of its own
// (queuepair/stage.go) on routes that move host memory only.
//
// backend/ibverbs registers device memory with the NIC through DmaBufFD
// (one export per pool slab or own allocation: Block.Extent) and
// ibv_reg_dmabuf_mr where the device, the driver and the NIC can
// (backend/ibverbs dmabuf.go); cudafake's Config.DmaBuf plays a device
// that exports dma-buf. Not run on a GPU beside an RDMA NIC.
//
// What is next: device memory a program already has (register in place);
// figures on a GPU.
// Open questions for a GPU: whether the legacy IPC mapping of a peer
// outlives the owner's cuMemFree (the pool frees exported blocks rather
// than reuse them either way), and the cost of Free's synchronous zeroing.
package cuda
