//go:build linux

package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
	"golang.org/x/sys/unix"
)

// The state table of one route: a sealed memfd the owner makes and both
// processes map. Slot 0 holds counters the initiator adds to (the owner's
// Served figures); slot s > 0 describes one region the initiator mapped.
const (
	slotSize   = 32
	tableSlots = 16384 // 512 KiB; at most tableSlots-1 regions mapped per route
)

// Words of a region slot.
const (
	wID       = 0 // region id; changes when the slot is given to another region
	wState    = 1 // stFree, stAlive, ...
	wLease    = 2 // lease deadline, CLOCK_MONOTONIC ns; 0: none
	wInFlight = 3 // copies in progress (the initiator adds and subtracts)
)

// Words of slot 0.
const (
	wOps      = 0
	wBytesIn  = 1 // written into the owner's memory
	wBytesOut = 2 // read from it
	wRejected = 3 // refused by the initiator's checks (bounds, access, state)
)

// Slot states.
const (
	stFree     = 0
	stAlive    = 1
	stRevoked  = 2
	stReleased = 3
	stExpired  = 4
)

// table is a mapped state table.
type table struct {
	mem []byte
	// coarse, set on an initiator's table (whose route holds
	// internal/coarseclock), makes enter's lease check read the coarse
	// clock; else it reads nanotime.
	coarse bool
	// refs counts an initiator's holders of the mapping: its route, and
	// each proxy gate (proxy.go), which may outlive the route; the last
	// one unmaps it (release).
	refs atomic.Int32
}

// word returns word i of slot s; s < tableSlots is the caller's check.
func (t *table) word(s uint32, i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&t.mem[int(s)*slotSize+i*8]))
}

// nanotime is the runtime's CLOCK_MONOTONIC clock, the same in every
// process of the host (time.Now's monotonic reading is per process).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// enter counts a copy into slot s for region id and returns stAlive if it
// may run (then leave must follow), else why not. The count is raised
// before the state is read and the owner sets the state before it reads
// the count (both sequentially consistent), so either the copy sees the
// cut or the owner sees the copy and waits for it.
func (t *table) enter(s uint32, id uint64) uint64 {
	n := t.word(s, wInFlight)
	n.Add(1)
	st := t.word(s, wState).Load()
	switch {
	case t.word(s, wID).Load() != id:
		st = stReleased
	case st != stAlive:
	default:
		if l := t.word(s, wLease).Load(); l != 0 && uint64(t.now()) > l {
			st = stExpired
		}
	}
	if st != stAlive {
		n.Add(^uint64(0))
	}
	return st
}

// now is the lease check's time: CLOCK_MONOTONIC ns, coarse on an
// initiator's table.
func (t *table) now() int64 {
	if !t.coarse {
		return nanotime()
	}
	return coarseclock.Mono()
}

// still reports whether a copy that entered slot s may go on (checked
// between the chunks of a long copy).
func (t *table) still(s uint32) uint64 { return t.word(s, wState).Load() }

// leave ends a copy that entered slot s.
func (t *table) leave(s uint32) { t.word(s, wInFlight).Add(^uint64(0)) }

// newTable makes the owner's table: a sealed memfd, mapped.
func newTable() (fd int, t *table, err error) {
	size := tableSlots * slotSize
	fd, err = unix.MemfdCreate("rdmamgr-shm-table", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	var mem []byte
	if err = unix.Ftruncate(fd, int64(size)); err == nil {
		if _, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err == nil {
			mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shm: state table: %w", err)
	}
	return fd, &table{mem: mem}, nil
}

// mapShared maps all of a memfd a peer passed, after checking it cannot
// be shrunk under us (sealed against shrinking, seals sealed): then no
// access to the mapping can fault. It returns the mapping and the file's
// identity.
func mapShared(fd int) (mem []byte, id fileID, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, id, fmt.Errorf("shm: fstat of a passed fd: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size <= 0 || st.Size > 1<<40 {
		return nil, id, fmt.Errorf("shm: passed fd is not a memory file (mode %o, %d bytes): %w", st.Mode, st.Size, rdmamgr.ErrProtocol)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	const need = unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	fl, ferr := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	// A read-only region comes as a read-only fd (of a memfd sealed
	// against writing): mapped read-only.
	ro := ferr == nil && fl&unix.O_ACCMODE == unix.O_RDONLY
	if err != nil || ferr != nil || seals&need != need || (!ro && seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0) {
		return nil, id, fmt.Errorf("shm: passed memfd not sealed against shrinking (seals %#x, %v): %w", seals, err, rdmamgr.ErrProtocol)
	}
	prot := unix.PROT_READ | unix.PROT_WRITE
	if ro {
		prot = unix.PROT_READ
	}
	mem, err = unix.Mmap(fd, 0, int(st.Size), prot, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, id, fmt.Errorf("shm: mmap of a passed memfd (%d bytes): %w", st.Size, err)
	}
	return mem, fileID{dev: st.Dev, ino: st.Ino}, nil
}

// fileID names a file: two fds of one memfd map once.
type fileID struct{ dev, ino uint64 }

// close unmaps the table.
func (t *table) close() { unix.Munmap(t.mem) }

// tryAcquire takes one more hold on an initiator's table unless its last
// one is gone.
func (t *table) tryAcquire() bool {
	for {
		n := t.refs.Load()
		if n <= 0 {
			return false
		}
		if t.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a hold; the last one unmaps the table.
func (t *table) release() {
	if t.refs.Add(-1) == 0 {
		t.close()
	}
}
