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
	"errors"
	"fmt"
	"unsafe"
)

// verbsRes are the per-backend resources: PD, completion channel, CQ.
type verbsRes struct {
	pd *C.struct_ibv_pd
	ch *C.struct_ibv_comp_channel
	cq *C.struct_ibv_cq
}

func (d *devContext) allocRes(cqSize int) (*verbsRes, error) {
	r := &verbsRes{}
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, fmt.Errorf("ibverbs: alloc pd on %s: %w", d.name, cerr(err))
	}
	r.pd = pd
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		r.free()
		return nil, fmt.Errorf("ibverbs: create completion channel: %w", cerr(err))
	}
	r.ch = ch
	if rc := C.rm_set_nonblock(ch.fd); rc != 0 {
		r.free()
		return nil, fmt.Errorf("ibverbs: completion channel fd: %w", errnoErr(rc))
	}
	cq, err := C.ibv_create_cq(d.ctx, C.int(cqSize), nil, ch, 0)
	if cq == nil {
		r.free()
		return nil, fmt.Errorf("ibverbs: create cq of %d: %w", cqSize, cerr(err))
	}
	r.cq = cq
	return r, nil
}

// free destroys the CQ, the channel and the PD. Every QP and MR must be
// gone and every CQ event acked (rm_wait_cq acks each one).
func (r *verbsRes) free() error {
	var errs []error
	if r.cq != nil {
		if rc := C.ibv_destroy_cq(r.cq); rc != 0 {
			errs = append(errs, fmt.Errorf("ibverbs: destroy cq: %w", errnoErr(rc)))
		}
		r.cq = nil
	}
	if r.ch != nil {
		if rc := C.ibv_destroy_comp_channel(r.ch); rc != 0 {
			errs = append(errs, fmt.Errorf("ibverbs: destroy completion channel: %w", errnoErr(rc)))
		}
		r.ch = nil
	}
	if r.pd != nil {
		if rc := C.ibv_dealloc_pd(r.pd); rc != 0 {
			errs = append(errs, fmt.Errorf("ibverbs: dealloc pd: %w", errnoErr(rc)))
		}
		r.pd = nil
	}
	return errors.Join(errs...)
}

// cqCapacity returns the CQ's real size (the device may round up).
func (r *verbsRes) cqCapacity() int { return int(r.cq.cqe) }

// wc is one work completion.
type wc struct {
	wrID      uint64
	status    uint32
	vendorErr uint32
	qpn       uint32
	byteLen   uint32 // bytes received (receive completions)
}

// poll fills out with up to len(out) completions.
func (r *verbsRes) poll(out []C.struct_rm_wc) (int, error) {
	n := C.rm_poll(r.cq, &out[0], C.int(len(out)))
	if n < 0 {
		return 0, errors.New("ibverbs: ibv_poll_cq failed")
	}
	return int(n), nil
}

func (r *verbsRes) arm() error {
	if rc := C.rm_arm(r.cq); rc != 0 {
		return fmt.Errorf("ibverbs: ibv_req_notify_cq: %w", errnoErr(rc))
	}
	return nil
}

// waitCQ blocks until the CQ has an event (true) or wakefd fires (false).
func (r *verbsRes) waitCQ(wakefd int) (bool, error) {
	rc := C.rm_wait_cq(r.ch, C.int(wakefd))
	if rc < 0 {
		return false, fmt.Errorf("ibverbs: waiting for completions: %w", errnoErr(rc))
	}
	return rc == 1, nil
}

// wcBuf is a batch of completions in C layout (Go memory, no pointers).
type wcBuf []C.struct_rm_wc

func newWCBuf(n int) wcBuf { return make(wcBuf, n) }

func (b wcBuf) at(i int) wc {
	w := &b[i]
	return wc{wrID: uint64(w.wr_id), status: uint32(w.status), vendorErr: uint32(w.vendor_err), qpn: uint32(w.qp_num),
		byteLen: uint32(w.byte_len)}
}

// set fills completion i from w (tests).
func (b wcBuf) set(i int, w wc) {
	b[i] = C.struct_rm_wc{wr_id: C.uint64_t(w.wrID), status: C.uint32_t(w.status), vendor_err: C.uint32_t(w.vendorErr),
		qp_num: C.uint32_t(w.qpn), byte_len: C.uint32_t(w.byteLen)}
}

// eventFD is an eventfd used to wake the poller and the async goroutine.
type eventFD int

func newEventFD() (eventFD, error) {
	fd, err := C.eventfd(0, C.EFD_CLOEXEC|C.EFD_NONBLOCK)
	if fd < 0 {
		return -1, fmt.Errorf("ibverbs: eventfd: %w", cerr(err))
	}
	return eventFD(fd), nil
}

// fire makes the fd readable for good (it is never read).
func (e eventFD) fire() {
	one := C.uint64_t(1)
	C.write(C.int(e), unsafe.Pointer(&one), 8)
}

func (e eventFD) close() { C.close(C.int(e)) }
