//go:build ibverbs

package ibverbs

// The verbs*.go files are the only ones that call C: thin typed wrappers
// over libibverbs and the helpers of shim.c (verbs_device.go: devices,
// ports, GIDs, async events; verbs_cq.go: protection domain, completion
// queue and its channel, eventfd; verbs_qp.go: memory regions, queue pairs
// and posts). Everything above them is plain Go.

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "shim.h"
*/
import "C"

import (
	"net/netip"
	"syscall"
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
	wrSend      = C.IBV_WR_SEND
	wrAtomicCAS = C.IBV_WR_ATOMIC_CMP_AND_SWP
	wrAtomicFAA = C.IBV_WR_ATOMIC_FETCH_AND_ADD

	accessLocalWrite   = C.IBV_ACCESS_LOCAL_WRITE
	accessRemoteWrite  = C.IBV_ACCESS_REMOTE_WRITE
	accessRemoteRead   = C.IBV_ACCESS_REMOTE_READ
	accessRemoteAtomic = C.IBV_ACCESS_REMOTE_ATOMIC

	atomicNone = C.IBV_ATOMIC_NONE

	wcSuccess      = C.IBV_WC_SUCCESS
	wcLocLenErr    = C.IBV_WC_LOC_LEN_ERR
	wcLocProtErr   = C.IBV_WC_LOC_PROT_ERR
	wcWRFlushErr   = C.IBV_WC_WR_FLUSH_ERR
	wcRemAccessErr = C.IBV_WC_REM_ACCESS_ERR
	wcRetryExcErr  = C.IBV_WC_RETRY_EXC_ERR
	wcRNRRetryErr  = C.IBV_WC_RNR_RETRY_EXC_ERR

	evCQErr          = C.IBV_EVENT_CQ_ERR
	evQPFatal        = C.IBV_EVENT_QP_FATAL
	evQPReqErr       = C.IBV_EVENT_QP_REQ_ERR
	evQPAccessErr    = C.IBV_EVENT_QP_ACCESS_ERR
	evCommEst        = C.IBV_EVENT_COMM_EST
	evPathMigErr     = C.IBV_EVENT_PATH_MIG_ERR
	evDeviceFatal    = C.IBV_EVENT_DEVICE_FATAL
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

func gidString(g [16]byte) string { return netip.AddrFrom16(g).String() }
