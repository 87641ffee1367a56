//go:build ibverbs

package ibverbs

// This file is the only one that calls C: thin typed wrappers over
// libibverbs and the helpers of shim.c. Everything above it is plain Go.

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Enum values of verbs.h the Go side needs.
const (
	portActive        = C.IBV_PORT_ACTIVE
	linkLayerEthernet = C.IBV_LINK_LAYER_ETHERNET
	gidTypeRoCEv2     = C.IBV_GID_TYPE_ROCE_V2
	gidTypeRoCEv1     = C.IBV_GID_TYPE_ROCE_V1
	gidTypeIB         = C.IBV_GID_TYPE_IB

	wrRDMAWrite = C.IBV_WR_RDMA_WRITE
	wrRDMARead  = C.IBV_WR_RDMA_READ

	accessLocalWrite  = C.IBV_ACCESS_LOCAL_WRITE
	accessRemoteWrite = C.IBV_ACCESS_REMOTE_WRITE
	accessRemoteRead  = C.IBV_ACCESS_REMOTE_READ

	wcSuccess      = C.IBV_WC_SUCCESS
	wcLocLenErr    = C.IBV_WC_LOC_LEN_ERR
	wcLocQPOpErr   = C.IBV_WC_LOC_QP_OP_ERR
	wcLocProtErr   = C.IBV_WC_LOC_PROT_ERR
	wcWRFlushErr   = C.IBV_WC_WR_FLUSH_ERR
	wcRemInvReqErr = C.IBV_WC_REM_INV_REQ_ERR
	wcRemAccessErr = C.IBV_WC_REM_ACCESS_ERR
	wcRemOpErr     = C.IBV_WC_REM_OP_ERR
	wcRetryExcErr  = C.IBV_WC_RETRY_EXC_ERR
	wcRNRRetryErr  = C.IBV_WC_RNR_RETRY_EXC_ERR
	wcRemAbortErr  = C.IBV_WC_REM_ABORT_ERR
	wcFatalErr     = C.IBV_WC_FATAL_ERR
	wcRespTimeout  = C.IBV_WC_RESP_TIMEOUT_ERR

	evCQErr          = C.IBV_EVENT_CQ_ERR
	evQPFatal        = C.IBV_EVENT_QP_FATAL
	evQPReqErr       = C.IBV_EVENT_QP_REQ_ERR
	evQPAccessErr    = C.IBV_EVENT_QP_ACCESS_ERR
	evCommEst        = C.IBV_EVENT_COMM_EST
	evPathMigErr     = C.IBV_EVENT_PATH_MIG_ERR
	evDeviceFatal    = C.IBV_EVENT_DEVICE_FATAL
	evPortActive     = C.IBV_EVENT_PORT_ACTIVE
	evPortErr        = C.IBV_EVENT_PORT_ERR
	evLastWQEReached = C.IBV_EVENT_QP_LAST_WQE_REACHED
)

// wcStatusStr is ibv_wc_status_str.
func wcStatusStr(status uint32) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(status)))
}

func eventTypeStr(t int32) string {
	return C.GoString(C.ibv_event_type_str(C.enum_ibv_event_type(t)))
}

func portStateStr(s int) string {
	return C.GoString(C.ibv_port_state_str(C.enum_ibv_port_state(s)))
}

// errnoErr turns an errno value returned by a verb into an error.
func errnoErr(rc C.int) error {
	if rc < 0 {
		rc = -rc
	}
	if rc == 0 {
		return syscall.EINVAL // a verb failed without saying why
	}
	return syscall.Errno(rc)
}

// cerr picks the errno cgo captured, else EINVAL.
func cerr(err error) error {
	if err == nil {
		return syscall.EINVAL
	}
	return err
}

type portAttr struct {
	state, linkLayer, activeMTU, maxMTU int
	maxMsg                              uint32
	gidTblLen                           int
	lid                                 uint16
}

type devAttr struct {
	ports, maxCQE, maxQPWR, maxQPRdAtom, maxQPInitRdAtom, maxQP int
}

type gidEntry struct {
	index int
	gid   [16]byte
	typ   int // gidType*, -1 unknown
}

func gidTypeStr(t int) string {
	switch t {
	case gidTypeRoCEv2:
		return "RoCE v2"
	case gidTypeRoCEv1:
		return "RoCE v1"
	case gidTypeIB:
		return "IB"
	}
	return "unknown"
}

// devContext is an open device.
type devContext struct {
	ctx  *C.struct_ibv_context
	name string
}

// deviceNames lists the devices; ErrNoDevices when there are none.
func deviceNames() ([]string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || err == nil {
			return nil, ErrNoDevices
		}
		return nil, fmt.Errorf("%w: ibv_get_device_list: %v", ErrNoDevices, err)
	}
	defer C.ibv_free_device_list(list)
	if n == 0 {
		return nil, ErrNoDevices
	}
	names := make([]string, 0, int(n))
	for i := 0; i < int(n); i++ {
		names = append(names, C.GoString(C.ibv_get_device_name(C.rm_dev_at(list, C.int(i)))))
	}
	return names, nil
}

// openDevice opens the device called name.
func openDevice(name string) (*devContext, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil || n == 0 {
		if list != nil {
			C.ibv_free_device_list(list)
		}
		if err != nil && !errors.Is(err, syscall.ENOSYS) {
			return nil, fmt.Errorf("%w: ibv_get_device_list: %v", ErrNoDevices, err)
		}
		return nil, ErrNoDevices
	}
	defer C.ibv_free_device_list(list)
	for i := 0; i < int(n); i++ {
		d := C.rm_dev_at(list, C.int(i))
		if C.GoString(C.ibv_get_device_name(d)) != name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, fmt.Errorf("ibverbs: open %s: %w", name, cerr(err))
		}
		return &devContext{ctx: ctx, name: name}, nil
	}
	return nil, fmt.Errorf("ibverbs: no device %q: %w", name, backend.ErrNotSupported)
}

func (d *devContext) close() {
	if d.ctx != nil {
		C.ibv_close_device(d.ctx)
		d.ctx = nil
	}
}

func (d *devContext) query() (devAttr, error) {
	var a C.struct_rm_dev
	if rc := C.rm_query_device(d.ctx, &a); rc != 0 {
		return devAttr{}, fmt.Errorf("ibverbs: query %s: %w", d.name, errnoErr(rc))
	}
	return devAttr{
		ports: int(a.phys_port_cnt), maxCQE: int(a.max_cqe), maxQPWR: int(a.max_qp_wr),
		maxQPRdAtom: int(a.max_qp_rd_atom), maxQPInitRdAtom: int(a.max_qp_init_rd_atom), maxQP: int(a.max_qp),
	}, nil
}

func (d *devContext) queryPort(port int) (portAttr, error) {
	var a C.struct_rm_port
	if rc := C.rm_query_port(d.ctx, C.int(port), &a); rc != 0 {
		return portAttr{}, fmt.Errorf("ibverbs: query %s port %d: %w", d.name, port, errnoErr(rc))
	}
	return portAttr{
		state: int(a.state), linkLayer: int(a.link_layer), activeMTU: int(a.active_mtu), maxMTU: int(a.max_mtu),
		maxMsg: uint32(a.max_msg_sz), gidTblLen: int(a.gid_tbl_len), lid: uint16(a.lid),
	}, nil
}

func (d *devContext) queryGID(port, idx int) (gidEntry, error) {
	var g C.struct_rm_gid
	if rc := C.rm_query_gid(d.ctx, C.int(port), C.int(idx), &g); rc != 0 {
		return gidEntry{}, fmt.Errorf("ibverbs: query %s port %d gid %d: %w", d.name, port, idx, errnoErr(rc))
	}
	e := gidEntry{index: idx, typ: int(g._type)}
	copy(e.gid[:], C.GoBytes(unsafe.Pointer(&g.raw[0]), 16))
	return e, nil
}

// gids returns the port's non-zero GID entries.
func (d *devContext) gids(port int, tblLen int) []gidEntry {
	var out []gidEntry
	for i := 0; i < tblLen; i++ {
		e, err := d.queryGID(port, i)
		if err != nil || e.gid == ([16]byte{}) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func gidString(g [16]byte) string { return netip.AddrFrom16(g).String() }

// asyncFD makes the async event fd non-blocking.
func (d *devContext) setAsyncNonblock() error {
	if rc := C.rm_set_nonblock(d.ctx.async_fd); rc != 0 {
		return fmt.Errorf("ibverbs: async fd: %w", errnoErr(rc))
	}
	return nil
}

// waitAsync blocks for the next async event; ok false when woken by wakefd.
func (d *devContext) waitAsync(wakefd int) (ev asyncEvent, ok bool, err error) {
	var e C.struct_rm_async
	rc := C.rm_wait_async(d.ctx, C.int(wakefd), &e)
	switch {
	case rc < 0:
		return ev, false, errnoErr(rc)
	case rc == 0:
		return ev, false, nil
	}
	return asyncEvent{typ: int32(e._type), qpn: uint32(e.qp_num), port: int(e.port)}, true, nil
}

type asyncEvent struct {
	typ  int32
	qpn  uint32
	port int
}

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
	opcode    uint32
	vendorErr uint32
	qpn       uint32
	byteLen   uint32
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
	return wc{wrID: uint64(w.wr_id), status: uint32(w.status), opcode: uint32(w.opcode),
		vendorErr: uint32(w.vendor_err), qpn: uint32(w.qp_num), byteLen: uint32(w.byte_len)}
}

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

func (r *verbsRes) createQP(maxSendWR int) (*queuePair, error) {
	qp, err := C.rm_create_qp(r.pd, r.cq, C.int(maxSendWR))
	if qp == nil {
		return nil, fmt.Errorf("ibverbs: ibv_create_qp: %w", cerr(err))
	}
	return &queuePair{qp: qp, qpn: uint32(C.rm_qp_num(qp))}, nil
}

func (q *queuePair) toInit(port int) error {
	if rc := C.rm_qp_init(q.qp, C.int(port)); rc != 0 {
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

func (b *wrBuf) add(wrID, laddr, raddr uint64, n, lkey, rkey uint32, opcode int) {
	*b = append(*b, C.struct_rm_wr{wr_id: C.uint64_t(wrID), laddr: C.uint64_t(laddr), raddr: C.uint64_t(raddr),
		len: C.uint32_t(n), lkey: C.uint32_t(lkey), rkey: C.uint32_t(rkey), opcode: C.uint32_t(opcode)})
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

func (q *queuePair) postProbe(wrID uint64) error {
	if rc := C.rm_post_probe(q.qp, C.uint64_t(wrID)); rc != 0 {
		return fmt.Errorf("ibverbs: probe on qp %d: %w", q.qpn, errnoErr(rc))
	}
	return nil
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
