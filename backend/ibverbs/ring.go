//go:build ibverbs

package ibverbs

import (
	"fmt"
	"sync"
	"syscall"
)

// ring is the backend's own registered memory of one queue pair: the
// receive slots of its control messages (ctlmsg.go) and the cells its own
// work requests use (a notice, a Send's header, an ack, an atomic's old
// value). One anonymous mapping, one LOCAL_WRITE memory region; it is
// freed only once the queue pair is destroyed, so the device never touches
// freed memory.
type ring struct {
	id       uint32 // 31 bits, in the ids of its work requests
	mem      []byte
	mr       *memReg
	slots    int
	slotSize int
	cellBase int
	cells    int
	cqRes    int // completion-queue entries reserved for the queue pair

	mu   sync.Mutex // guards free
	free []int      // free cells, as a stack
}

// cellSize is the size of a cell: the largest thing a cell holds is a
// notice (ctlNoticeSize).
const cellSize = 64

// Work-request ids of control work (receives and acks) have ctlBit set;
// they are not in the slot table (whose ids never have it). Bits 32..62
// are the ring's id, so a completion that outlived its queue pair never
// matches a new one with the same number; bit 31 marks an ack's send, the
// low bits are the slot or cell.
const (
	ctlBit = 1 << 63
	ackBit = 1 << 31
)

func (g *ring) recvID(slot int) uint64 { return ctlBit | uint64(g.id)<<32 | uint64(slot) }
func (g *ring) ackID(cell int) uint64  { return ctlBit | uint64(g.id)<<32 | ackBit | uint64(cell) }

// splitCtlID splits a control work-request id.
func splitCtlID(id uint64) (ringID uint32, ack bool, i int) {
	return uint32(id>>32) &^ (1 << 31), id&ackBit != 0, int(id & (ackBit - 1))
}

// newRing maps and registers a ring of slots receive slots of slotSize
// bytes and cells cells.
func (b *Backend) newRing(slots, slotSize, cells int) (*ring, error) {
	slotSize = (slotSize + cellSize - 1) / cellSize * cellSize
	size := slots*slotSize + cells*cellSize
	page := syscall.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: map a ring of %d bytes: %w", size, err)
	}
	mr, err := b.res.regMR(addrOf(mem), uint64(len(mem)), accessLocalWrite)
	if err != nil {
		syscall.Munmap(mem)
		return nil, err
	}
	g := &ring{id: b.ringSeq.Add(1) & (1<<31 - 1), mem: mem, mr: mr, slots: slots, slotSize: slotSize,
		cellBase: slots * slotSize, cells: cells, free: make([]int, cells)}
	for i := range cells {
		g.free[i] = cells - 1 - i
	}
	return g, nil
}

// release deregisters and unmaps the ring; the queue pair is gone.
func (g *ring) release() error {
	if g.mem == nil {
		return nil
	}
	err := g.mr.dereg()
	if err == nil {
		err = syscall.Munmap(g.mem)
		g.mem = nil
	}
	return err
}

func (g *ring) slot(i int) []byte { return g.mem[i*g.slotSize : (i+1)*g.slotSize] }
func (g *ring) slotAddr(i int) uint64 {
	return addrOf(g.mem) + uint64(i*g.slotSize)
}

func (g *ring) cell(i int) []byte {
	off := g.cellBase + i*cellSize
	return g.mem[off : off+cellSize]
}

func (g *ring) cellAddr(i int) uint64 { return addrOf(g.mem) + uint64(g.cellBase+i*cellSize) }

// allocCell takes a free cell.
func (g *ring) allocCell() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.free)
	if n == 0 {
		return 0, false
	}
	c := g.free[n-1]
	g.free = g.free[:n-1]
	return c, true
}

func (g *ring) freeCell(c int) {
	g.mu.Lock()
	g.free = append(g.free, c)
	g.mu.Unlock()
}

// postRecvs posts every receive slot of g on qp.
func (g *ring) postRecvs(qp *queuePair) error {
	for i := range g.slots {
		if err := g.postRecv(qp, i); err != nil {
			return err
		}
	}
	return nil
}

func (g *ring) postRecv(qp *queuePair, i int) error {
	return qp.postRecv(g.recvID(i), g.slotAddr(i), uint32(g.slotSize), g.mr.lkey)
}
