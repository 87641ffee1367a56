package memreg

import (
	"encoding/binary"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// LocalRun resolves the local handles of a chain of operations posted
// together, most of them in the same few regions: the references to the
// region last resolved are taken together (one atomic operation for the
// rest of the chain), so each further handle in it costs its checks of
// key and bounds only. Close gives back the references no handle took.
// The zero LocalRun is ready; it is one goroutine's.
type LocalRun struct {
	g     *Registry
	r     *Region // last resolved
	spare int64   // references to r taken and not handed out
	// r's identity and memory, copied when references to it are taken
	// (they never change while it is registered), so that Next reads
	// the run alone: no load through r or g, no Key copied to the stack.
	span Span
}

// Span is a LocalRun's region as a loop that hands out its spare
// references itself compares each handle with (LocalRun.Spare): its id,
// owner and key (compare with KeyEqual), and its memory. Read only.
type Span struct {
	ID, Owner uint64
	Key       buffer.Key
	Mem       []byte
}

// NewLocalRun returns a LocalRun on g; near, when not nil, is a region of
// g's (held or not) the first handle is probably in: resolving one in it
// skips the registry's lookup.
func (g *Registry) NewLocalRun(near *Region) LocalRun { return LocalRun{g: g, r: near} }

// Last returns the region the run resolved last (nil: none), a hint for
// the next NewLocalRun.
func (lr *LocalRun) Last() *Region { return lr.r }

// Next is Acquire's common case, writing the Ref into *dst (a data path's
// field) rather than returning it: when b is in the last region and a
// reference to it is spare. It returns the Ref's bytes (dst's Bytes, read
// without reading *dst back) and true; it reports false, changing
// nothing, otherwise: then call Acquire.
func (lr *LocalRun) Next(b *buffer.Buffer, dst *Ref) ([]byte, bool) {
	off, n, size := b.Offset, b.Length, uint64(len(lr.span.Mem))
	if lr.spare == 0 || b.Region != lr.span.ID || b.OwnerID != lr.span.Owner || !keyEqual(&lr.span.Key, &b.Key) ||
		off > size || n > size-off { // buffer.CheckRange, inlined
		return nil, false
	}
	lr.spare--
	mem := lr.span.Mem[off : off+n : off+n]
	dst.r, dst.mem, dst.remote, dst.off, dst.n = lr.r, mem, false, off, n
	return mem, true
}

// keyEqual is buffer.Key.Equal of *a and *b, read where they are: Equal
// takes its keys by value, which copies both through the stack.
func keyEqual(a, b *buffer.Key) bool {
	d := (binary.LittleEndian.Uint64(a[0:8]) ^ binary.LittleEndian.Uint64(b[0:8])) |
		(binary.LittleEndian.Uint64(a[8:16]) ^ binary.LittleEndian.Uint64(b[8:16]))
	return d == 0 // one compare of the folded words: its time does not depend on where they differ
}

// held records that lr holds spare references to its region r (host
// memory, not a proxy): Next may hand them out.
func (lr *LocalRun) held(spare int64) {
	r := lr.r
	lr.spare = spare
	lr.span = Span{ID: r.id, Owner: lr.g.ownerID, Key: r.key, Mem: r.mem}
}

// Acquire is AcquireLocalOf(b); want is how many handles the chain may
// still resolve, this one included: when b's region is not the last one's,
// that many references to it are taken at once. A proxy region's handles
// (RegisterProxy) each take the registry's way, gate included: no
// reference to a proxy is spare, so none skips its owner's word.
func (lr *LocalRun) Acquire(b *buffer.Buffer, want int64) (Ref, error) {
	if r := lr.r; r != nil && r.gate == nil && r.dev == nil && b.Region == r.id && b.OwnerID == lr.g.ownerID && r.key.Equal(b.Key) &&
		buffer.CheckRange(r.size, b.Offset, b.Length) == nil {
		if lr.spare > 0 || r.enterN(max(want, 1)) {
			if lr.spare == 0 {
				lr.held(max(want, 1))
			}
			lr.spare--
			return Ref{r: r, mem: r.span(b.Offset, b.Length), off: b.Offset, n: b.Length}, nil
		}
	}
	lr.Close()
	ref, err := lr.g.AcquireLocalOf(b)
	if err != nil {
		return ref, err
	}
	lr.r = ref.r
	if want > 1 && lr.r.gate == nil && lr.r.enterN(want-1) {
		lr.held(want - 1)
	}
	return ref, nil
}

// Close gives back the references taken and not handed out.
func (lr *LocalRun) Close() {
	if lr.spare > 0 {
		lr.r.refs.LeaveN(lr.spare)
	}
	lr.spare = 0
}

// enterN is enter of n references at once.
func (r *Region) enterN(n int64) bool {
	for {
		if !r.refs.EnterN(n) {
			return false
		}
		if !r.moving.Load() {
			return true
		}
		r.refs.LeaveN(n)
		for r.moving.Load() {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// ReleaseAll releases every Ref of refs, as Release on each would, and
// zeroes them: the local references to one region (not a proxy, whose
// gate each Ref leaves) next to each other in refs are dropped with one
// atomic operation.
func ReleaseAll(refs []Ref) {
	for i := 0; i < len(refs); {
		r := refs[i].r
		if r == nil || refs[i].remote || r.gate != nil {
			refs[i].Release()
			i++
			continue
		}
		j := i + 1
		for j < len(refs) && refs[j].r == r && !refs[j].remote {
			j++
		}
		clear(refs[i:j])
		r.refs.LeaveN(int64(j - i))
		i = j
	}
}

// LeaveAll drops one reference to each region of rs that is not nil (the
// references Detach took out of their Refs): neighbours in rs that are
// the same region are dropped with one atomic operation. rs is left as
// it is (the references are gone: do not drop them again).
func LeaveAll(rs []*Region) {
	for i := 0; i < len(rs); {
		r := rs[i]
		j := i + 1
		for j < len(rs) && rs[j] == r {
			j++
		}
		if r != nil {
			r.refs.LeaveN(int64(j - i))
		}
		i = j
	}
}

// AcquireNear is AcquireLocalOf(b)'s common case for a handle posted on
// its own, writing the Ref into *dst (a data path's field) rather than
// returning it: b is in near (a region of g's, held or not; host memory,
// not a proxy) and near is still registered. It returns the Ref's bytes;
// nil, changing nothing, when the case is not that one: then take the
// registry's way (AcquireLocalOf, or a LocalRun).
func (g *Registry) AcquireNear(near *Region, b *buffer.Buffer, dst *Ref) []byte {
	if near == nil || near.gate != nil || near.dev != nil || near.mem == nil || b.Region != near.id || b.OwnerID != g.ownerID ||
		!keyEqual(&near.key, &b.Key) || b.Length == 0 || b.Offset > near.size || b.Length > near.size-b.Offset || !near.enter() {
		return nil
	}
	off, n := b.Offset, b.Length
	mem := near.mem[off : off+n : off+n]
	dst.r, dst.mem, dst.remote, dst.off, dst.n = near, mem, false, off, n
	return mem
}

// Take is Next for a caller that holds each reference only for a moment
// and drops a run's together (Give): it returns b's bytes when b is in
// the run's region and takes one of its spare references. When none is
// spare and b is in the last region resolved (or the near one the run
// began with; host memory, not a proxy), want of them are taken first,
// as Acquire takes them. It reports false, changing nothing, otherwise.
// The reference is the caller's: Give drops it, or Hold puts it in a Ref.
func (lr *LocalRun) Take(b *buffer.Buffer, want int64) ([]byte, bool) {
	if lr.spare == 0 && !lr.Refill(b, want) {
		return nil, false
	}
	return lr.TakeSpare(b)
}

// Refill is Take's first half, for a loop that hands out the spare
// references itself (Spare, Used) and calls Refill only when none is
// left: it takes want references (at least 1) to the last region resolved
// when none is spare and b is in it (host memory, not a proxy), and
// reports whether one is spare now.
func (lr *LocalRun) Refill(b *buffer.Buffer, want int64) bool {
	if lr.spare > 0 {
		return true
	}
	r := lr.r
	if r == nil || r.gate != nil || r.dev != nil || b.Region != r.id || b.OwnerID != lr.g.ownerID || !keyEqual(&r.key, &b.Key) ||
		buffer.CheckRange(r.size, b.Offset, b.Length) != nil || !r.enterN(max(want, 1)) {
		return false
	}
	lr.held(max(want, 1))
	return true
}

// TakeSpare is Take when a reference is spare: it reports false,
// changing nothing, when none is spare or b is not in the run's region.
func (lr *LocalRun) TakeSpare(b *buffer.Buffer) ([]byte, bool) {
	off, n, size := b.Offset, b.Length, uint64(len(lr.span.Mem))
	if lr.spare == 0 || b.Region != lr.span.ID || b.OwnerID != lr.span.Owner || !keyEqual(&lr.span.Key, &b.Key) || off > size || n > size-off {
		return nil, false
	}
	lr.spare--
	return lr.span.Mem[off : off+n : off+n], true
}

// Spare is what a loop that hands out the run's spare references itself
// reads (TakeSpare's checks, written out where the compiler keeps them
// cheap): the run's region, as a Span to compare each handle with, and
// how many references are spare. The loop tells the run how many it
// handed out with Used, and Refill takes more.
func (lr *LocalRun) Spare() (*Span, int64) { return &lr.span, lr.spare }

// Used records that n of the references Spare reported were handed out,
// as n TakeSpare calls would.
func (lr *LocalRun) Used(n int64) {
	if n < 0 || n > lr.spare {
		panic("memreg: LocalRun.Used of more references than are spare")
	}
	lr.spare -= n
}

// KeyEqual reports whether keys *a and *b are equal, reading them where
// they are, in time independent of where they differ.
func KeyEqual(a, b *buffer.Key) bool { return keyEqual(a, b) }

// Give drops n references to the run's region (Last) that Take handed out.
func (lr *LocalRun) Give(n int64) {
	if n > 0 {
		lr.r.refs.LeaveN(n)
	}
}

// Hold makes *dst the reference Take handed out for b (its bytes mem),
// as Next would have written it: dst's Release then drops it.
func (lr *LocalRun) Hold(b *buffer.Buffer, mem []byte, dst *Ref) {
	dst.r, dst.mem, dst.remote, dst.off, dst.n = lr.r, mem, false, b.Offset, b.Length
}
