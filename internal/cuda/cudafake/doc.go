// Package cudafake is an in-memory stand-in for the CUDA driver
// (cuda.Driver), so everything above the driver (staging pipelines, the
// travel of IPC handles, mapping caches, revocation) is tested on machines
// without a GPU.
//
// A World is one host: its devices and their memory. World.Process gives a
// Driver that plays one process, with its own address space: device memory
// is host memory (a []byte per allocation) behind fake device addresses
// that differ between processes, so code that sends an address where it
// should send an IPC handle fails here as it would on a GPU. IPC handles
// resolve across the processes of one World; a forged, stale or foreign
// handle fails, a process's own handle fails, and a second open in one
// process fails with cuda.ErrAlreadyMapped (open once, cache, close once).
//
// Each stream owns a goroutine that runs its copies in order, after the
// enqueuing call returned; World.Hold stops copies from starting, so a test
// can hold one in flight and check who waits for it. A copy that finds its
// memory freed under it fails the stream with cuda.ErrIllegalAddress
// (returned by StreamQuery and StreamSynchronize from then on). Errors are
// the same *cuda.Error values the real driver returns.
//
// Driver.Close plays the process's exit: its streams drain and stop, its
// IPC mappings close, its memory is freed. World.Stats counts what tests
// assert on: allocations live, copies by direction and bytes, copies from
// host memory that was not pinned, IPC opens live, memory freed while
// another process still had it open.
//
// What it does not model: timing, contexts beyond one primary context per
// device, peer access, dma-buf (DmaBufFD fails with ErrNotSupported, as on
// a device without it), and the sticky context errors of the real driver.
package cudafake
