package cudafake

import (
	"crypto/rand"
	"sync"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// Config shapes a World.
type Config struct {
	// Devices is the number of devices (default 1).
	Devices int
	// DeviceMemory is each device's capacity in bytes (default 1 GiB);
	// allocations past it fail with cuda.ErrOutOfMemory.
	DeviceMemory uint64
	// DmaBuf, when set, makes every device say it exports dma-buf
	// (AttrDmaBufSupported 1) and DmaBufFD return what DmaBuf returns
	// for a valid range (page aligned, inside one allocation of the
	// process, rounded up to the page). The stand-in has no dma-buf of its
	// own: the test gives the descriptor (any fd its stand-in of the NIC
	// takes; a memfd, or a udmabuf where the kernel has one), and the
	// caller closes it. Nil: no dma-buf (AttrDmaBufSupported 0, DmaBufFD
	// fails with cuda.ErrNotSupported), as on most devices.
	DmaBuf func(dev int, size uint64) (fd int, err error)
}

// Stats are the World's counters. Live* are current values; the others
// only grow.
type Stats struct {
	Allocs, Frees                      int
	LiveAllocs                         int
	LiveBytes                          uint64
	LiveHost                           int // HostAlloc'd and HostRegister'd ranges
	Streams                            int // live streams
	CopiesHtoD, CopiesDtoH, CopiesDtoD int
	BytesCopied                        uint64
	PageableCopies                     int // copies whose host memory was not pinned
	IPCOpens, IPCCloses                int
	LiveIPC                            int
	FreedWhileOpen                     int // MemFree of memory another process had open
	FailedCopies                       int // copies that failed on their stream
	DmaBufExports                      int // fds DmaBufFD handed out
}

// World is one host of fake processes sharing its devices.
type World struct {
	cfg Config
	tag [8]byte // in every IPC handle, so another World's handle fails

	// mu guards everything below and every Process's state: the stand-in
	// favours plain over fast.
	mu     sync.Mutex
	used   []uint64 // bytes allocated per device
	allocs map[uint64]*alloc
	nextID uint64
	procs  int
	holds  int
	gate   chan struct{} // closed while no Hold is in force
	stats  Stats
}

// alloc is one device allocation, shared by its owner and the processes
// that opened it.
type alloc struct {
	id    uint64
	dev   int
	mem   []byte
	owner *Driver
	nonce [16]byte // proves a handle was issued, not guessed
	opens int      // processes that have it open through IPC
	freed bool
}

// NewWorld returns an empty World.
func NewWorld(cfg Config) *World {
	if cfg.Devices <= 0 {
		cfg.Devices = 1
	}
	if cfg.DeviceMemory == 0 {
		cfg.DeviceMemory = 1 << 30
	}
	w := &World{
		cfg:    cfg,
		used:   make([]uint64, cfg.Devices),
		allocs: make(map[uint64]*alloc),
		gate:   make(chan struct{}),
	}
	close(w.gate)
	rand.Read(w.tag[:])
	return w
}

// Process returns a Driver that plays a new process on this host.
func (w *World) Process() *Driver {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.procs++
	return &Driver{
		w:       w,
		next:    uint64(0x7f00_0000_0000) - uint64(w.procs)<<36,
		ctxRefs: make([]int, w.cfg.Devices),
		streams: make(map[cuda.Stream]*stream),
	}
}

// Stats returns the counters now.
func (w *World) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Hold stops copies from starting (those running finish) until every
// release returned by Hold was called; release is idempotent. Streams
// still accept copies meanwhile, and StreamSynchronize and StreamDestroy
// wait for them, so release before waiting.
func (w *World) Hold() (release func()) {
	w.mu.Lock()
	if w.holds == 0 {
		w.gate = make(chan struct{})
	}
	w.holds++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			if w.holds--; w.holds == 0 {
				close(w.gate)
			}
			w.mu.Unlock()
		})
	}
}

// waitGate returns when no Hold is in force.
func (w *World) waitGate() {
	for {
		w.mu.Lock()
		g, held := w.gate, w.holds > 0
		w.mu.Unlock()
		if !held {
			return
		}
		<-g
	}
}
