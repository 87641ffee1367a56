package node

import (
	"bytes"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Two nodes on this host, in the same network and pid namespaces, under
// the default selection: the route between them is shm, its first choice,
// and bytes move over it both ways.
func TestSameHostChoosesSHM(t *testing.T) {
	ctx := testCtx(t)
	a := startNode(t, Config{})
	b := startNode(t, Config{})
	peer := a.ClientOf(b.Addr(), "")
	local, err := a.Client().RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := peer.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.Client().RequestQueuePair(ctx, peer.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	if k := qp.Kind(); k != backend.KindSHM {
		t.Fatalf("queue pair on %s, want shm", k)
	}
	mine, _ := a.Manager().Bytes(local)
	theirs, _ := b.Manager().Bytes(remote)
	copy(mine, bytes.Repeat([]byte("same host "), len(mine)/10))
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatal("put: the peer's buffer differs")
	}
	copy(theirs, bytes.Repeat([]byte("and back. "), len(theirs)/10))
	if err := qp.Get(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatal("get: our buffer differs")
	}

	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 || st.Routes[0].Backend != "shm" || st.Routes[0].Why != "first choice" || st.Routes[0].State != "up" {
		t.Errorf("routes %v: want one shm route, first choice", st.Routes)
	}
	st, err = b.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Inbound) != 1 || st.Inbound[0].Backend != "shm" || st.Inbound[0].Why != "the peer's choice" {
		t.Errorf("peer's inbound routes %v: want one shm route, the peer's choice", st.Inbound)
	}
}
