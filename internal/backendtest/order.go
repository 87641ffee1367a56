package backendtest

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Ordering as an RC queue pair has it: a PutWithImm's event and a Send's
// (or SendWithImm's) message reach the owner only after every Put posted
// before them on the route has landed. Backends may fence route-wide (a
// route carries every queue pair to its peer): that is what is checked.

// orderRounds is how many times the plan below runs; each round refills
// A's memory so that a Put that has not landed leaves B's old bytes.
const orderRounds = 8

// orderGroups returns the Put sizes posted ahead of each notice of a
// round: large ones split into many frames, small ones, many small ones
// with a large one last (the likeliest to be overtaken).
func orderGroups(maxPut int) [][]int {
	c := func(n int) int { return min(n, maxPut) }
	small := make([]int, 0, 24)
	for i := range 20 {
		small = append(small, 1+(i*131)%700)
	}
	return [][]int{
		{c(4 << 20), 1, 8, 4096, c(64<<10 + 3)},
		append(small, c(1<<20+7), c(300<<10+1)),
		{c(64 << 10), 3, c(2<<20 + 5)},
		{c(4<<20 - 1)},
	}
}

// noticeKinds returns the notices A's routes carry: PutWithImm, Send,
// SendWithImm (with withImm[i] set); it skips the test if none.
func (p *VerbsPair) noticeKinds(t *testing.T) (kinds []backend.Op, withImm []bool) {
	for _, k := range []struct {
		op  backend.Op
		imm bool
	}{{backend.OpWriteImm, false}, {backend.OpSend, false}, {backend.OpSend, true}} {
		if p.carries(k.op) {
			kinds, withImm = append(kinds, k.op), append(withImm, k.imm)
		}
	}
	if len(kinds) == 0 {
		t.Skipf("the %s backend carries neither PutWithImm nor Send", p.A.Kind())
	}
	return kinds, withImm
}

// orderPut is one Put of the plan: A's [off, off+n) to B's.
type orderPut struct{ off, n int }

// noticeBytes is the size of each notice's own payload.
const noticeBytes = 64

// testOrderAfterPuts posts, round after round, groups of Puts each
// followed at once by a notice (PutWithImm, Send, SendWithImm in turn);
// the owner's inbox checks, on the backend's delivery path, that the
// bytes of every Put of the round posted before the notice are in B's
// memory.
func testOrderAfterPuts(t *testing.T, f Factory) {
	groups := orderGroups(min(4<<20, f.MaxSize))
	p := NewVerbsPair(t, f, 2*len(groups), 2*len(groups))
	p.Need(t, backend.OpWrite)
	kinds, withImm := p.noticeKinds(t)

	// Layout: each Put of a round has its own range, the same in A and B.
	var puts [][]orderPut
	total := 0
	for _, g := range groups {
		var ps []orderPut
		for _, n := range g {
			total += 5 // gaps
			ps = append(ps, orderPut{total, n})
			total += n
		}
		puts = append(puts, ps)
	}
	ha, la := Alloc(t, p.RegA, total, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, total, buffer.AccessReadWrite)
	hn, ln := Alloc(t, p.RegA, len(groups)*noticeBytes, buffer.AccessReadWrite)
	hi, _ := Alloc(t, p.RegB, len(groups)*noticeBytes, accessNotify)
	rbuf, _ := Alloc(t, p.RegB, 2*len(groups)*noticeBytes, buffer.AccessReadWrite)
	Random(t, lb)

	// check is called on delivery with the notice's id (round*len+group):
	// every Put of that round up to that group must have landed.
	var round atomic.Int64
	var checked, early atomic.Int64
	check := func(id uint32) error {
		r, g := int(id)/len(groups), int(id)%len(groups)
		if int64(r) != round.Load() {
			return fmt.Errorf("notice %d of round %d during round %d", g, r, round.Load())
		}
		checked.Add(1)
		for gg := 0; gg <= g; gg++ {
			for i, pu := range puts[gg] {
				if d := FirstDiff(lb[pu.off:pu.off+pu.n], la[pu.off:pu.off+pu.n]); d >= 0 {
					early.Add(1)
					return fmt.Errorf("round %d, notice %d (%s) before the bytes of Put %d of group %d (%d bytes; byte %d differs)",
						r, g, kinds[(r+g)%len(kinds)], i, gg, pu.n, d)
				}
			}
		}
		return nil
	}
	p.Inbox.SetCheck(func(ev backend.Event) error { return check(ev.Imm) })
	p.Inbox.SetMessageCheck(func(m Message) error {
		if len(m.Mem) < 4 {
			return fmt.Errorf("message of %d bytes", len(m.Mem))
		}
		return check(binary.LittleEndian.Uint32(m.Mem))
	})

	perRound := len(groups)
	for _, g := range groups {
		perRound += len(g)
	}
	rec := NewRecorder(perRound)
	for r := range orderRounds {
		round.Store(int64(r))
		Random(t, la) // B holds the last round's bytes: a Put not landed shows
		deadline := time.Now().Add(f.Timeout)
		var releases []func()
		post := func(wr *backend.WorkRequest, release func()) {
			releases = append(releases, release)
			if err := p.Route.Post(wr); err != nil {
				t.Fatalf("round %d: post %s: %v", r, wr.Op, err)
			}
		}
		for g := range groups {
			for _, pu := range puts[g] {
				post(NewWR(t, p.RegA, backend.OpWrite, Slice(t, ha, pu.off, pu.n), Slice(t, hb, pu.off, pu.n), deadline, rec))
			}
			id := uint32(r*len(groups) + g)
			k := (r + g) % len(kinds)
			local := Slice(t, hn, g*noticeBytes, noticeBytes)
			binary.LittleEndian.PutUint32(ln[g*noticeBytes:], id)
			var remote buffer.Buffer
			if kinds[k] == backend.OpWriteImm {
				remote = Slice(t, hi, g*noticeBytes, noticeBytes)
			} else {
				p.post(t, Slice(t, rbuf, (r%2*len(groups)+g)*noticeBytes, noticeBytes))
			}
			post(VerbWR(t, p.RegA, kinds[k], local, remote, Operands{Imm: id, HasImm: withImm[k]}, deadline, rec))
		}
		for range perRound {
			if res := rec.Wait(t, f.Timeout); res.Err != nil {
				t.Fatalf("round %d: %s of %d bytes: %v", r, res.WR.Op, len(res.WR.Local), res.Err)
			}
		}
		for _, release := range releases {
			release()
		}
		for g := range groups {
			if kinds[(r+g)%len(kinds)] == backend.OpWriteImm {
				nextEvent(t, p.Inbox, f.Timeout)
			} else {
				nextMessage(t, p.Inbox, f.Timeout)
			}
		}
	}
	if n := early.Load(); n > 0 {
		t.Errorf("%d of %d notices reached the owner before the bytes of a Put posted ahead of them", n, checked.Load())
	}
	if c := checked.Load(); c != orderRounds*int64(len(groups)) {
		t.Errorf("%d notices checked, want %d", c, orderRounds*len(groups))
	}
	// The faults (the first of each kind) are reported by NewVerbsPair's
	// cleanup; clear nothing here.
}

// testOrderAfterAtomics: FetchAdds in flight ahead of each notice; on
// delivery the owner's word holds the sum of every FetchAdd posted before
// it (RC executes a queue pair's atomics before the requests after them).
func testOrderAfterAtomics(t *testing.T, f Factory) {
	const rounds, adds = 24, 8
	p := NewVerbsPair(t, f, 2, 2)
	p.Need(t, backend.OpFetchAdd)
	kinds, withImm := p.noticeKinds(t)
	hw, lw := Alloc(t, p.RegB, 8, accessAtomic)
	w := ownerWord(t, lw, 0)
	w.Store(0)
	hn, ln := Alloc(t, p.RegA, noticeBytes, buffer.AccessReadWrite)
	hi, _ := Alloc(t, p.RegB, noticeBytes, accessNotify)
	rbuf, _ := Alloc(t, p.RegB, noticeBytes, buffer.AccessReadWrite)
	var checked, early atomic.Int64
	check := func(id uint32) error {
		checked.Add(1)
		if got, want := w.Load(), uint64(id+1)*adds; got < want {
			early.Add(1)
			return fmt.Errorf("notice %d with the word at %d: want at least %d", id, got, want)
		}
		return nil
	}
	p.Inbox.SetCheck(func(ev backend.Event) error { return check(ev.Imm) })
	p.Inbox.SetMessageCheck(func(m Message) error { return check(binary.LittleEndian.Uint32(m.Mem)) })
	rec := NewRecorder(adds + 1)
	for r := range rounds {
		deadline := time.Now().Add(f.Timeout)
		for range adds {
			wr, _ := VerbWR(t, p.RegA, backend.OpFetchAdd, buffer.Buffer{}, hw, Operands{Swap: 1}, deadline, rec)
			if err := p.Route.Post(wr); err != nil {
				t.Fatalf("round %d: post fetch-add: %v", r, err)
			}
		}
		k := r % len(kinds)
		binary.LittleEndian.PutUint32(ln, uint32(r))
		remote := hi
		if kinds[k] != backend.OpWriteImm {
			remote = buffer.Buffer{}
			p.post(t, rbuf)
		}
		wr, release := VerbWR(t, p.RegA, kinds[k], hn, remote, Operands{Imm: uint32(r), HasImm: withImm[k]}, deadline, rec)
		if err := p.Route.Post(wr); err != nil {
			t.Fatalf("round %d: post %s: %v", r, kinds[k], err)
		}
		for range adds + 1 {
			if res := rec.Wait(t, f.Timeout); res.Err != nil {
				t.Fatalf("round %d: %s: %v", r, res.WR.Op, res.Err)
			}
		}
		release()
		if kinds[k] == backend.OpWriteImm {
			nextEvent(t, p.Inbox, f.Timeout)
		} else {
			nextMessage(t, p.Inbox, f.Timeout)
		}
	}
	if n := early.Load(); n > 0 || checked.Load() != rounds {
		t.Errorf("%d of %d notices (of %d) reached the owner before the FetchAdds posted ahead of them", n, checked.Load(), rounds)
	}
}
