//go:build ibverbs

package ibverbs

/*
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// memReg is a registered memory region.
type memReg struct {
	mr         *C.struct_ibv_mr
	lkey, rkey uint32
	addr       uint64
	length     uint64
}

func (r *verbsRes) regMR(addr, length uint64, access int) (*memReg, error) {
	mr, err := C.rm_reg_mr(r.pd, C.uint64_t(addr), C.uint64_t(length), C.int(access))
	if mr == nil {
		return nil, fmt.Errorf("ibverbs: ibv_reg_mr of %d bytes: %w", length, cerr(err))
	}
	return &memReg{mr: mr, lkey: uint32(C.rm_mr_lkey(mr)), rkey: uint32(C.rm_mr_rkey(mr)), addr: addr, length: length}, nil
}

func (m *memReg) dereg() error {
	if m.mr == nil {
		return nil
	}
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return fmt.Errorf("ibverbs: ibv_dereg_mr: %w", errnoErr(rc))
	}
	m.mr = nil
	return nil
}

// addrOf returns the address of p's first byte. The memory must not move:
// it is mmap'd off the Go heap or pinned by the registry.
func addrOf(p []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))) }

// queuePair is an RC queue pair.
type queuePair struct {
	qp  *C.struct_ibv_qp
	qpn uint32
}

func (r *verbsRes) createQP(maxSendWR, maxRecvWR int) (*queuePair, error) {
	qp, err := C.rm_create_qp(r.pd, r.cq, C.int(maxSendWR), C.int(maxRecvWR))
	if qp == nil {
		return nil, fmt.Errorf("ibverbs: ibv_create_qp: %w", cerr(err))
	}
	return &queuePair{qp: qp, qpn: uint32(C.rm_qp_num(qp))}, nil
}

// toInit moves q to INIT; with atomics, peers may run atomics through it.
func (q *queuePair) toInit(port int, atomics bool) error {
	a := C.int(0)
	if atomics {
		a = 1
	}
	if rc := C.rm_qp_init(q.qp, C.int(port), a); rc != 0 {
		return fmt.Errorf("ibverbs: qp %d to INIT: %w", q.qpn, errnoErr(rc))
	}
	return nil
}

type rtrAttr struct {
	port, mtu, sgidIndex, maxDestRd int
	global                          bool
	peer                            routeInfo
}

func (q *queuePair) toRTR(a rtrAttr) error {
	g := a.peer.gid
	global := C.int(0)
	if a.global {
		global = 1
	}
	rc := C.rm_qp_rtr(q.qp, C.int(a.port), C.uint32_t(a.peer.qpn), C.uint32_t(a.peer.psn), C.int(a.mtu),
		global, C.uint16_t(a.peer.lid), (*C.uint8_t)(unsafe.Pointer(&g[0])), C.int(a.sgidIndex), C.int(a.maxDestRd))
	if rc != 0 {
		return fmt.Errorf("ibverbs: qp %d to RTR (peer qp %d): %w", q.qpn, a.peer.qpn, errnoErr(rc))
	}
	return nil
}

func (q *queuePair) toRTS(psn uint32, timeout, retry, maxRd int) error {
	if rc := C.rm_qp_rts(q.qp, C.uint32_t(psn), C.int(timeout), C.int(retry), C.int(maxRd)); rc != 0 {
		return fmt.Errorf("ibverbs: qp %d to RTS: %w", q.qpn, errnoErr(rc))
	}
	return nil
}

func (q *queuePair) toErr() error {
	if rc := C.rm_qp_to_err(q.qp); rc != 0 {
		return fmt.Errorf("ibverbs: qp %d to ERR: %w", q.qpn, errnoErr(rc))
	}
	return nil
}

func (q *queuePair) destroy() error {
	if q.qp == nil {
		return nil
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return fmt.Errorf("ibverbs: destroy qp %d: %w", q.qpn, errnoErr(rc))
	}
	q.qp = nil
	return nil
}

// wrBuf is a batch of work requests in C layout (Go memory, no pointers).
type wrBuf []C.struct_rm_wr

// add appends an RDMA WRITE or READ.
func (b *wrBuf) add(wrID, laddr, raddr uint64, n, lkey, rkey uint32, opcode int) {
	*b = append(*b, C.struct_rm_wr{wr_id: C.uint64_t(wrID), laddr: C.uint64_t(laddr), raddr: C.uint64_t(raddr),
		len: C.uint32_t(n), lkey: C.uint32_t(lkey), rkey: C.uint32_t(rkey), opcode: C.uint32_t(opcode)})
}

// addAtomic appends an atomic on the word at raddr whose old value lands
// in the 8 bytes at laddr; compareAdd is the compare value of
// wrAtomicCAS, the addend of wrAtomicFAA.
func (b *wrBuf) addAtomic(wrID, laddr uint64, lkey uint32, raddr uint64, rkey uint32, opcode int, compareAdd, swap uint64) {
	*b = append(*b, C.struct_rm_wr{wr_id: C.uint64_t(wrID), laddr: C.uint64_t(laddr), raddr: C.uint64_t(raddr),
		len: 8, lkey: C.uint32_t(lkey), rkey: C.uint32_t(rkey), opcode: C.uint32_t(opcode),
		compare_add: C.uint64_t(compareAdd), swap: C.uint64_t(swap)})
}

// addSend appends a SEND of n bytes at laddr followed by n2 bytes at
// laddr2 (none if n2 is 0).
func (b *wrBuf) addSend(wrID, laddr uint64, n, lkey uint32, laddr2 uint64, n2, lkey2 uint32) {
	*b = append(*b, C.struct_rm_wr{wr_id: C.uint64_t(wrID), laddr: C.uint64_t(laddr), len: C.uint32_t(n),
		lkey: C.uint32_t(lkey), laddr2: C.uint64_t(laddr2), len2: C.uint32_t(n2), lkey2: C.uint32_t(lkey2),
		opcode: C.uint32_t(wrSend)})
}

// post posts the batch; it returns how many were accepted and the error.
func (q *queuePair) post(b wrBuf) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var posted C.int
	if rc := C.rm_post(q.qp, &b[0], C.int(len(b)), &posted); rc != 0 {
		return int(posted), fmt.Errorf("ibverbs: ibv_post_send on qp %d: %w", q.qpn, errnoErr(rc))
	}
	return int(posted), nil
}

// postRecv posts one receive of n bytes at addr.
func (q *queuePair) postRecv(wrID, addr uint64, n, lkey uint32) error {
	if rc := C.rm_post_recv(q.qp, C.uint64_t(wrID), C.uint64_t(addr), C.uint32_t(n), C.uint32_t(lkey)); rc != 0 {
		return fmt.Errorf("ibverbs: ibv_post_recv on qp %d: %w", q.qpn, errnoErr(rc))
	}
	return nil
}

func (q *queuePair) postProbe(wrID uint64) error {
	if rc := C.rm_post_probe(q.qp, C.uint64_t(wrID)); rc != 0 {
		return fmt.Errorf("ibverbs: probe on qp %d: %w", q.qpn, errnoErr(rc))
	}
	return nil
}
