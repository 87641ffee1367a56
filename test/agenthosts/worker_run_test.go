//go:build linux

package agenthosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// run moves bytes with every peer (or c.Only) at once, one goroutine per
// peer, for at most c.Max iterations each or until stop closes. An
// iteration Puts fresh bytes (seeded by writer, owner, round and
// iteration, so a stale byte shows) into the worker's slot at the peer,
// Gets them back into a poisoned buffer and compares, then Gets a piece of
// the owner's own slot and compares. It says "warm" once every peer had an
// iteration check out, and "failed" with the peer at each peer's first
// failure.
func (w *worker) run(c command, stop <-chan struct{}) map[string]*peerResult {
	w.mu.Lock()
	ps := w.peers
	w.mu.Unlock()
	only := map[string]bool{}
	for _, id := range c.Only {
		only[id] = true
	}
	var (
		mu   sync.Mutex
		out  = map[string]*peerResult{}
		wg   sync.WaitGroup
		cold int
	)
	var mine []*peer
	for i := range ps {
		if p := &ps[i]; len(only) == 0 || only[p.info.ID] {
			mine = append(mine, p)
		}
	}
	cold = len(mine)
	warm := func() {
		mu.Lock()
		cold--
		last := cold == 0
		mu.Unlock()
		if last {
			w.say(event{Ev: "warm"})
		}
	}
	for _, p := range mine {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := w.runPeer(p, c, stop, warm)
			mu.Lock()
			out[p.info.ID] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// lengths are the transfer sizes an iteration cycles through (capped at
// the slot): tiny, unaligned, a page, a slot.
var lengths = []int{1, 8, 63, 4096, 4097, 1 << 20, 100, 12345}

func (w *worker) runPeer(p *peer, c command, stop <-chan struct{}, warm func()) *peerResult {
	r := &peerResult{Errs: map[string]int{}, First: map[string]string{}, Kinds: map[string]int{}}
	srcB, _ := w.local.Slice(uint64(2*p.info.Index*w.slot), uint64(w.slot))
	dstB, _ := w.local.Slice(uint64((2*p.info.Index+1)*w.slot), uint64(w.slot))
	src := w.localMem[2*p.info.Index*w.slot:][:w.slot]
	dst := w.localMem[(2*p.info.Index+1)*w.slot:][:w.slot]
	mine, _ := p.shared.Slice(uint64((1+w.index)*w.slot), uint64(w.slot))
	owner, _ := p.shared.Slice(0, uint64(w.slot))
	fail := func(what string, err error) {
		if len(r.Errs) == 0 {
			w.say(event{Ev: "failed", Peer: p.info.ID})
		}
		name := sentinel(err)
		r.Errs[name]++
		if _, ok := r.First[name]; !ok {
			r.First[name] = what + ": " + err.Error()
		}
		w.dropQP(p)
		select { // no spinning on a dead peer
		case <-stop:
		case <-time.After(50 * time.Millisecond):
		}
	}
	check := func(what string, got, want []byte) bool {
		if bytes.Equal(got, want) {
			return true
		}
		r.Mismatch++
		if r.Bad == "" {
			i := 0
			for got[i] == want[i] {
				i++
			}
			r.Bad = fmt.Sprintf("%s: %d bytes, first wrong byte at %d: %#x, want %#x", what, len(got), i, got[i], want[i])
		}
		return false
	}
	for k := 0; k < c.Max; k++ {
		select {
		case <-stop:
			return r
		default:
		}
		r.Iters++
		q, err := w.qp(p)
		if err != nil {
			fail("queue pair", err)
			continue
		}
		r.Kinds[string(q.Kind())]++
		n := min(lengths[k%len(lengths)], w.slot)
		off := (k * 13) % (w.slot - n + 1)
		fillPattern(src[:n], opSeed(w.index, p.info.Index, c.Round, k))
		rem, _ := mine.Slice(uint64(off), uint64(n))
		sb, _ := srcB.Slice(0, uint64(n))
		db, _ := dstB.Slice(0, uint64(n))
		if err := do(q.Put, sb, rem); err != nil {
			fail("put", err)
			continue
		}
		poison(dst[:n])
		if err := do(q.Get, db, rem); err != nil {
			fail("get", err)
			continue
		}
		ok := check(fmt.Sprintf("get of my put (round %d, iteration %d, offset %d)", c.Round, k, off), dst[:n], src[:n])
		oo := (k * 101) % (w.slot - n + 1)
		ob, _ := owner.Slice(uint64(oo), uint64(n))
		poison(dst[:n])
		if err := do(q.Get, db, ob); err != nil {
			fail("get owner", err)
			continue
		}
		if check(fmt.Sprintf("get of the owner's bytes (offset %d)", oo), dst[:n], p.owner[oo:oo+n]) && ok {
			if r.OK++; r.OK == 1 {
				warm()
			}
		}
	}
	return r
}

// do runs one operation to its end within opTimeout.
func do(op func(context.Context, buffer.Buffer, buffer.Buffer) *queuepair.WorkRequest, local, remote buffer.Buffer) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return op(ctx, local, remote).Wait(ctx)
}

// sentinels name the errors a worker tells apart: the module's, most
// telling first (a failure may wrap several).
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrPeerGone", rdmamgr.ErrPeerGone},
	{"ErrReleased", rdmamgr.ErrReleased},
	{"ErrClosed", rdmamgr.ErrClosed},
	{"ErrUnknownPeer", rdmamgr.ErrUnknownPeer},
	{"ErrDeadline", rdmamgr.ErrDeadline},
	{"ErrTimeout", rdmamgr.ErrTimeout},
	{"ErrRevoked", rdmamgr.ErrRevoked},
	{"ErrExpired", rdmamgr.ErrExpired},
	{"ErrBadKey", rdmamgr.ErrBadKey},
	{"ErrOutOfRange", rdmamgr.ErrOutOfRange},
	{"ErrAccess", rdmamgr.ErrAccess},
	{"ErrInvalid", rdmamgr.ErrInvalid},
	{"ErrLimit", rdmamgr.ErrLimit},
	{"ErrWrongPeer", rdmamgr.ErrWrongPeer},
	{"ErrLengthMismatch", rdmamgr.ErrLengthMismatch},
	{"ErrNotLocal", rdmamgr.ErrNotLocal},
	{"ErrProtocol", rdmamgr.ErrProtocol},
	{"ErrUnauthenticated", rdmamgr.ErrUnauthenticated},
	{"ErrVersion", rdmamgr.ErrVersion},
	{"ErrNotSupported", rdmamgr.ErrNotSupported},
	{"ErrNotStarted", rdmamgr.ErrNotStarted},
	{"ErrUnknownMessage", rdmamgr.ErrUnknownMessage},
	{"ErrUnreachableReply", rdmamgr.ErrUnreachableReply},
	{"ErrMessageTooLarge", rdmamgr.ErrMessageTooLarge},
	{"ErrBadResponse", rdmamgr.ErrBadResponse},
	{"DeadlineExceeded", context.DeadlineExceeded},
}

func sentinel(err error) string {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "other"
}

// fillPattern writes the byte stream of seed into p (splitmix64).
func fillPattern(p []byte, seed uint64) {
	x := seed
	for len(p) > 0 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		for i := 0; i < 8 && len(p) > 0; i++ {
			p[0] = byte(z >> (8 * i))
			p = p[1:]
		}
	}
}

func ownerSeed(owner int) uint64 { return 0xA5A5_0000_0000_0000 | uint64(owner) }

func opSeed(writer, owner, round, iter int) uint64 {
	return uint64(writer)<<48 ^ uint64(owner)<<40 ^ uint64(round)<<32 ^ uint64(iter)
}

// poison fills p with a byte no pattern run is made of.
func poison(p []byte) {
	for i := range p {
		p[i] = 0xEE
	}
}

// runBench times s.Count operations of s.Size bytes to s.Peer's bench
// buffer, s.Conc in flight.
func (w *worker) runBench(s *benchSpec) *benchResult {
	res := &benchResult{}
	w.mu.Lock()
	var p *peer
	for i := range w.peers {
		if w.peers[i].info.ID == s.Peer {
			p = &w.peers[i]
		}
	}
	w.mu.Unlock()
	if p == nil || p.bench.IsZero() || w.bench.IsZero() || s.Conc*s.Size > int(w.bench.Length) || s.Size > int(p.bench.Length) {
		res.Errs, res.First = 1, "no such peer or bench buffer too small"
		return res
	}
	q, err := w.qp(p)
	if err != nil {
		res.Errs, res.First = 1, err.Error()
		return res
	}
	res.Kind = string(q.Kind())
	op := q.Put
	if s.Op == "get" {
		op = q.Get
	}
	remote, _ := p.bench.Slice(0, uint64(s.Size))
	lat := make([]time.Duration, s.Count)
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	start := time.Now()
	for c := 0; c < s.Conc; c++ {
		local, _ := w.bench.Slice(uint64(c*s.Size), uint64(s.Size))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= s.Count {
					return
				}
				t0 := time.Now()
				err := do(op, local, remote)
				lat[i] = time.Since(t0)
				if err != nil {
					mu.Lock()
					if res.Errs++; res.First == "" {
						res.First = err.Error()
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	res.MiBs = float64(s.Size) * float64(s.Count) / el.Seconds() / (1 << 20)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.P50us = float64(lat[len(lat)/2].Nanoseconds()) / 1e3
	return res
}
