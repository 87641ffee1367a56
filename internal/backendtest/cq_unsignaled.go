package backendtest

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// testCQUnsignaled: selective signaling (Op.Unsignaled). Chains of 16
// Puts and Gets of mixed sizes (small ones a route copies at once, large
// ones it stripes), all unsignaled but the last, keep 4 chains in flight
// on one queue pair; each reaped chain is re-posted at once. The queue
// reports only the signaled ones (and the failures), and when it hands
// over a chain's signal every operation posted before it on the queue
// pair is done: its bytes in place, its work request free.
// Where a route survives a remote error (an RC queue pair does not: the
// refusal fails what is behind it), every tenth chain carries a Get with
// a wrong key, unsignaled: it is reported through the queue with the
// refusal, before its chain's signal.
func testCQUnsignaled(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const chains, chain, rounds, slot = 4, 16, 48, 4 << 10
	big := min(2<<20, f.MaxSize) // over TCP's chunk: striped, it finishes after the small ops behind it
	cq := queuepair.NewCompletionQueue(chains * chain)
	qp := NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq)
	bigSlot := chain - 2 // one large operation per chain, at this index
	span := (chain-1)*slot + big
	ha, la := Alloc(t, p.RegA, chains*span, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, chains*span, buffer.AccessReadWrite)
	bad := hb
	bad.Key[0] ^= 0xff
	if bad.RDMA.RKey != 0 {
		bad.RDMA.RKey ^= 0xA5
	}
	rng := mrand.New(mrand.NewPCG(5, uint64(time.Now().UnixNano())))
	wrs := make([][]*queuepair.WorkRequest, chains)
	ops := make([][]queuepair.Op, chains)
	wantA, wantB := make([][]byte, chains), make([][]byte, chains)
	failAt := make([]int, chains) // the index of the chain's failing op, -1: none
	seq := make([]int, chains)    // when each chain was last posted
	posted := 0
	// arm builds chain c's next round: fresh bytes at both ends of its
	// span, the ops, the bytes each end should hold once they are done.
	arm := func(c int) {
		base := c * span
		Random(t, la[base:base+span])
		Random(t, lb[base:base+span])
		wantA[c], wantB[c] = bytes.Clone(la[base:base+span]), bytes.Clone(lb[base:base+span])
		failAt[c] = -1
		if posted%10 == 9 && f.WrongKeyErr != nil && f.RouteSurvivesRemoteError {
			failAt[c] = rng.IntN(chain - 1)
		}
		off := 0
		for i := range chain {
			n := 1 + rng.IntN(slot)
			if i == bigSlot {
				n = big
			}
			l, r := Slice(t, ha, base+off, n), Slice(t, hb, base+off, n)
			if i%2 == 0 {
				ops[c][i] = queuepair.PutOp(l, r)
				copy(wantB[c][off:off+n], la[base+off:base+off+n])
			} else {
				ops[c][i] = queuepair.GetOp(l, r)
				copy(wantA[c][off:off+n], lb[base+off:base+off+n])
			}
			if i == failAt[c] {
				r.Key, r.RDMA.RKey = bad.Key, bad.RDMA.RKey
				ops[c][i] = queuepair.GetOp(l, r) // refused by the owner: nothing moves
				copy(wantA[c][off:off+n], la[base+off:base+off+n])
				copy(wantB[c][off:off+n], lb[base+off:base+off+n])
			}
			ops[c][i].Unsignaled = i < chain-1
			ops[c][i].ID = uint64(c*chain+i) + 1
			if i == bigSlot {
				off += big
			} else {
				off += slot
			}
		}
		seq[c] = posted
		posted++
	}
	for c := range chains {
		wrs[c] = newWRs(chain)
		ops[c] = make([]queuepair.Op, chain)
		arm(c)
		qp.PostOps(context.Background(), wrs[c], ops[c])
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	out := make([]*queuepair.WorkRequest, chains*chain)
	failed := make([]bool, chains)
	signals := 0
	for signals < rounds {
		k, err := cq.Wait(ctx, out)
		if err != nil {
			t.Fatalf("after %d signals: %v", signals, err)
		}
		for _, w := range out[:k] {
			id := int(w.ID()) - 1
			c, i := id/chain, id%chain
			if id < 0 || c >= chains || wrs[c][i] != w {
				t.Fatalf("the queue reported a work request nobody posted (id %d)", w.ID())
			}
			if i != chain-1 { // an unsignaled op: only its failure is reported
				if i != failAt[c] || !errors.Is(w.Err(), f.WrongKeyErr) || failed[c] {
					t.Fatalf("chain %d op %d reported through the queue: %v (failing op %d, reported before %v)", c, i, w.Err(), failAt[c], failed[c])
				}
				failed[c] = true
				continue
			}
			if err := w.Err(); err != nil {
				t.Fatalf("chain %d's signal: %v", c, err)
			}
			if failAt[c] >= 0 && !failed[c] {
				t.Fatalf("chain %d's signal came before its failed op %d", c, failAt[c])
			}
			for j, u := range wrs[c][:chain-1] {
				if done, err := u.Poll(); !done || (err != nil) != (j == failAt[c]) {
					t.Fatalf("chain %d's signal reaped, op %d: done %v, %v", c, j, done, err)
				}
			}
			for d := range chains { // and so is every chain posted before it
				for j, u := range wrs[d] {
					if done, _ := u.Poll(); seq[d] < seq[c] && !done {
						t.Fatalf("chain %d's signal reaped while op %d of chain %d, posted before it, is pending", c, j, d)
					}
				}
			}
			base := c * span
			AssertSame(t, "remote after a chain", lb[base:base+span], wantB[c])
			AssertSame(t, "local after a chain", la[base:base+span], wantA[c])
			signals++
			failed[c] = false
			if posted < rounds {
				arm(c)
				qp.PostOps(context.Background(), wrs[c], ops[c])
			}
		}
	}
	if k := cq.Poll(out); k != 0 {
		t.Fatalf("%d more reported than signaled and failed", k)
	}
	p.checkWorks(t)
}
