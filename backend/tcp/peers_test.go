package tcp

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// The server counts what it serves per peer manager, and whether the
// peer's data connections are open.
func TestServedByPeer(t *testing.T) {
	p := newPair(t, DefaultConfig(), DefaultConfig())
	remote, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessRead)
	local := make([]byte, 4096)
	for i := 0; i < 3; i++ {
		if err := do(t, p.route, backend.OpRead, local, remote); err != nil {
			t.Fatal(err)
		}
	}
	if err := do(t, p.route, backend.OpWrite, local, remote); err == nil {
		t.Fatal("write to a read-only buffer succeeded")
	}
	st := p.b.ServedByPeer()[backendtest.OwnerA]
	if st.Ops != 3 || st.BytesOut != 3*4096 || st.BytesIn != 0 || st.Rejected != 1 || st.Conns < 1 {
		t.Errorf("served for peer A: %+v", st)
	}
	if _, ok := p.a.ServedByPeer()[backendtest.OwnerB]; ok {
		t.Errorf("the initiator counts serving for its peer")
	}
	p.route.Close()
	for end := time.Now().Add(waitTimeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if p.b.ServedByPeer()[backendtest.OwnerA].Conns == 0 {
			return
		}
	}
	t.Errorf("peer A's connections still counted open after its route closed: %+v", p.b.ServedByPeer()[backendtest.OwnerA])
}
