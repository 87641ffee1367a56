package ibverbs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// TestToFallback: only Puts and Gets on a peer's device memory whose
// handle has no RDMA key, not through a far agent, go to the fallback.
func TestToFallback(t *testing.T) {
	key := buffer.RDMAKey{Addr: 0x1000, RKey: 7}
	for _, tc := range []struct {
		name string
		op   backend.Op
		loc  buffer.Location
		rdma buffer.RDMAKey
		via  uint16
		want bool
	}{
		{"device put without rkey", backend.OpWrite, buffer.CUDA(0), buffer.RDMAKey{}, 0, true},
		{"device get without rkey", backend.OpRead, buffer.CUDA(1), buffer.RDMAKey{}, 0, true},
		{"device put with rkey (dma-buf)", backend.OpWrite, buffer.CUDA(0), key, 0, false},
		{"device get with rkey (dma-buf)", backend.OpRead, buffer.CUDA(0), key, 0, false},
		{"host put", backend.OpWrite, buffer.Host, key, 0, false},
		{"host put without rkey", backend.OpWrite, buffer.Host, buffer.RDMAKey{}, 0, false},
		{"device PutWithImm", backend.OpWriteImm, buffer.CUDA(0), buffer.RDMAKey{}, 0, false},
		{"device compare-and-swap", backend.OpCompareSwap, buffer.CUDA(0), buffer.RDMAKey{}, 0, false},
		{"device fetch-add", backend.OpFetchAdd, buffer.CUDA(0), buffer.RDMAKey{}, 0, false},
		{"send", backend.OpSend, buffer.Host, buffer.RDMAKey{}, 0, false},
		{"device put through a far agent", backend.OpWrite, buffer.CUDA(0), buffer.RDMAKey{}, 3, false},
	} {
		wr := &backend.WorkRequest{Op: tc.op, Via: tc.via}
		wr.Remote.Location, wr.Remote.RDMA = tc.loc, tc.rdma
		if got := toFallback(wr); got != tc.want {
			t.Errorf("%s: toFallback %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFallbackAnswer: the responder answers a version 2 initiator
// without a fallback part, one whose fallback it does not share with an
// empty one (accept not called), else with its fallback's answer; a
// refusal of the fallback is the answer's error.
func TestFallbackAnswer(t *testing.T) {
	calls := 0
	accept := func(info []byte) ([]byte, error) {
		calls++
		if string(info) == "bad" {
			return nil, rdmamgr.ErrProtocol
		}
		return append([]byte("answer:"), info...), nil
	}
	v2 := goodInfo()
	if a, err := fallbackAnswer(v2, "tcp", accept); a != nil || err != nil || calls != 0 {
		t.Fatalf("version 2 initiator: %+v, %v, %d accepts", a, err, calls)
	}
	v3 := goodInfo()
	v3.fb = &fallbackInfo{kind: "tcp", info: []byte("x")}
	if a, err := fallbackAnswer(v3, "", accept); err != nil || a == nil || a.kind != "" || calls != 0 {
		t.Fatalf("responder without a fallback: %+v, %v, %d accepts", a, err, calls)
	}
	other := goodInfo()
	other.fb = &fallbackInfo{kind: "shm", info: []byte("x")}
	if a, err := fallbackAnswer(other, "tcp", accept); err != nil || a == nil || a.kind != "" || calls != 0 {
		t.Fatalf("fallback of another kind: %+v, %v, %d accepts", a, err, calls)
	}
	none := goodInfo()
	none.fb = &fallbackInfo{}
	if a, err := fallbackAnswer(none, "tcp", accept); err != nil || a == nil || a.kind != "" || calls != 0 {
		t.Fatalf("initiator without a fallback: %+v, %v, %d accepts", a, err, calls)
	}
	a, err := fallbackAnswer(v3, "tcp", accept)
	if err != nil || a == nil || a.kind != "tcp" || !bytes.Equal(a.info, []byte("answer:x")) || calls != 1 {
		t.Fatalf("shared fallback: %+v, %v, %d accepts", a, err, calls)
	}
	v3.fb.info = []byte("bad")
	if a, err := fallbackAnswer(v3, "tcp", accept); a != nil || !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("refused fallback: %+v, %v", a, err)
	}
}

// TestAddStats: a route's figures are its queue pair's plus its
// fallback route's.
func TestAddStats(t *testing.T) {
	s := addStats(backend.RouteStats{Ops: 1, BytesPut: 2, BytesGot: 3, Errors: 4, InFlight: 5},
		backend.RouteStats{Ops: 10, BytesPut: 20, BytesGot: 30, Errors: 40, InFlight: 50})
	if s != (backend.RouteStats{Ops: 11, BytesPut: 22, BytesGot: 33, Errors: 44, InFlight: 55}) {
		t.Fatalf("%+v", s)
	}
}
