//go:build linux

package test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

const (
	moveBufSize = 16 << 20 // each daemon's buffer, and each local buffer
	moveMaxOp   = 4 << 20  // largest single transfer
	moveTarget  = 40 << 20 // bytes each worker puts, and gets, at least
	batchRounds = 2        // then rounds with many transfers in flight
	batchPieces = 32       // transfers per round, each way
)

// TestMoveBothWays moves random slices (1 B .. 4 MiB at random offsets)
// from the test process into a 16 MiB buffer at each of two daemons and
// back into a different local slice, verifying every byte; meanwhile two
// `rdmamgr bench --verify` processes hammer the same daemons.
func TestMoveBothWays(t *testing.T) {
	checkLocalClean(t)
	ds := startDaemons(t, 2)

	// The bench processes run alongside: each daemon serves two peers.
	benchOut := make([]string, 2)
	benchErr := make([]error, 2)
	var benchWG sync.WaitGroup
	for i, op := range []string{"put", "get"} {
		benchWG.Add(1)
		go func() {
			defer benchWG.Done()
			benchOut[i], benchErr[i] = runBench(ds[i], op)
		}()
	}

	type moved struct{ put, get, ops, batched uint64 }
	results := make([]moved, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		// Set up on the test goroutine (t.Fatal), move on a worker.
		r := newRand(t)
		remote := remoteBuffer(t, d, moveBufSize, buffer.AccessReadWrite)
		src, srcMem := localBuffer(t, moveBufSize)
		dst, dstMem := localBuffer(t, moveBufSize)
		qp := queuePair(t, d)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[i]
			for res.put < moveTarget || res.get < moveTarget {
				n := 1 + r.Uint64N(moveMaxOp)
				// Mostly large, sometimes tiny: sizes of a few bytes
				// and unaligned edges are where off-by-ones live.
				if r.IntN(8) == 0 {
					n = 1 + r.Uint64N(64)
				}
				ro := r.Uint64N(moveBufSize - n + 1)
				so := r.Uint64N(moveBufSize - n + 1)
				do := r.Uint64N(moveBufSize - n + 1)
				fill(r, srcMem[so:so+n]) // fresh bytes: a lost put cannot pass
				if err := wait(qp.Put(context.Background(), slice(src, so, n), slice(remote, ro, n))); err != nil {
					t.Errorf("%s: put %d bytes local@%d -> remote@%d: %v", d.name, n, so, ro, err)
					return
				}
				fill(r, dstMem[do:do+n]) // poison: a lost get cannot pass
				if err := wait(qp.Get(context.Background(), slice(dst, do, n), slice(remote, ro, n))); err != nil {
					t.Errorf("%s: get %d bytes remote@%d -> local@%d: %v", d.name, n, ro, do, err)
					return
				}
				if !bytes.Equal(dstMem[do:do+n], srcMem[so:so+n]) {
					t.Errorf("%s: %d bytes put at remote@%d came back different: %s", d.name, n, ro, firstDiff(dstMem[do:do+n], srcMem[so:so+n]))
					return
				}
				res.put += n
				res.get += n
				res.ops++
			}
			// Then whole-buffer rounds with every transfer in flight at
			// once: the remote buffer cut into random pieces, each put
			// from and got back to a shuffled place locally.
			for range batchRounds {
				put, get, err := batchRound(r, qp, src, dst, remote, srcMem, dstMem)
				if err != nil {
					t.Errorf("%s: %v", d.name, err)
					return
				}
				res.put += put
				res.get += get
				res.batched++
			}
		}()
	}
	wg.Wait()
	benchWG.Wait()

	var put, get uint64
	for i, d := range ds {
		put += results[i].put
		get += results[i].get
		t.Logf("%s: %d put/get pairs and %d rounds of %d at once: %.1f MiB put, %.1f MiB got, every byte verified",
			d.name, results[i].ops, results[i].batched, batchPieces, float64(results[i].put)/(1<<20), float64(results[i].get)/(1<<20))
	}
	t.Logf("total: %.1f MiB put, %.1f MiB got", float64(put)/(1<<20), float64(get)/(1<<20))
	if t.Failed() {
		return
	}
	if put < 64<<20 || get < 64<<20 {
		t.Fatalf("moved %d bytes put, %d got: want at least 64 MiB each way", put, get)
	}

	// The daemons counted what they served: at least our traffic.
	for i, d := range ds {
		st, err := d.client().Status(testCtx(t, 30*time.Second))
		if err != nil {
			t.Fatalf("%s: status: %v", d.name, err)
		}
		if st.ServedBytesIn < results[i].put || st.ServedBytesOut < results[i].get {
			t.Errorf("%s: served %d bytes in, %d out; we put %d and got %d", d.name, st.ServedBytesIn, st.ServedBytesOut, results[i].put, results[i].get)
		}
	}

	for i, op := range []string{"put", "get"} {
		if benchErr[i] != nil {
			t.Errorf("bench --op %s against %s: %v\n%s", op, ds[i].name, benchErr[i], benchOut[i])
			continue
		}
		if !strings.Contains(benchOut[i], "verify: ok") {
			t.Errorf("bench --op %s against %s: no \"verify: ok\" in its output:\n%s", op, ds[i].name, benchOut[i])
		}
		t.Logf("bench --op %s against %s:\n%s", op, ds[i].name, strings.TrimSpace(benchOut[i]))
	}
}

// runBench runs `rdmamgr bench --verify` against d as a separate process.
// It returns stdout and stderr, and an error unless the bench exited 0.
func runBench(d *daemon, op string) (string, error) {
	out, errOut, err := runRdmamgr(3*time.Minute, "bench", "--peer", d.addr, "--op", op,
		"--size", "1MiB", "--count", "64", "--concurrency", "4", "--verify")
	if errOut != "" {
		out += "stderr:\n" + errOut
	}
	return out, err
}

// batchRound cuts the remote buffer into batchPieces random pieces, puts
// each from a shuffled place in src with all puts in flight at once, then
// gets each into another shuffled place in dst the same way, and compares.
func batchRound(r *rand.Rand, qp *queuepair.QueuePair, src, dst, remote buffer.Buffer, srcMem, dstMem []byte) (put, get uint64, err error) {
	size := remote.Length
	cuts := []uint64{0, size}
	for len(cuts) < batchPieces+1 {
		c := 1 + r.Uint64N(size-1)
		if !slices.Contains(cuts, c) {
			cuts = append(cuts, c)
		}
	}
	slices.Sort(cuts)
	type piece struct{ ro, so, do, n uint64 }
	pieces := make([]piece, batchPieces)
	for i := range pieces {
		pieces[i] = piece{ro: cuts[i], n: cuts[i+1] - cuts[i]}
	}
	place := func(set func(p *piece, off uint64)) {
		off := uint64(0)
		for _, i := range r.Perm(len(pieces)) {
			set(&pieces[i], off)
			off += pieces[i].n
		}
	}
	place(func(p *piece, off uint64) { p.so = off })
	place(func(p *piece, off uint64) { p.do = off })

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	fill(r, srcMem)
	var ops []queuepair.Op
	for _, p := range pieces {
		ops = append(ops, queuepair.PutOp(slice(src, p.so, p.n), slice(remote, p.ro, p.n)))
	}
	if err := qp.Submit(ctx, ops...).Wait(ctx); err != nil {
		return 0, 0, fmt.Errorf("%d puts at once: %w", len(ops), err)
	}
	fill(r, dstMem)
	ops = ops[:0]
	for _, p := range pieces {
		ops = append(ops, queuepair.GetOp(slice(dst, p.do, p.n), slice(remote, p.ro, p.n)))
	}
	if err := qp.Submit(ctx, ops...).Wait(ctx); err != nil {
		return 0, 0, fmt.Errorf("%d gets at once: %w", len(ops), err)
	}
	for _, p := range pieces {
		if got, want := dstMem[p.do:p.do+p.n], srcMem[p.so:p.so+p.n]; !bytes.Equal(got, want) {
			return 0, 0, fmt.Errorf("%d bytes at remote@%d, put from local@%d, got back to local@%d: %s", p.n, p.ro, p.so, p.do, firstDiff(got, want))
		}
	}
	return size, size, nil
}
