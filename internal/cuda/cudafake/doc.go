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
// dma-buf: by default the devices have none (AttrDmaBufSupported 0,
// DmaBufFD fails with ErrNotSupported, as on most devices). With
// Config.DmaBuf they say they have it and DmaBufFD checks the range as the
// driver does (page aligned, inside one allocation of the process) and
// returns the descriptor Config.DmaBuf gives: the stand-in's device memory
// is Go memory, so no real dma-buf of it exists; a test that hands the fd
// to a real NIC gets the NIC's verdict on the descriptor, not on this
// memory.
//
// What it does not model: timing, contexts beyond one primary context per
// device, peer access, and the sticky context errors of the real driver.
package cudafake
