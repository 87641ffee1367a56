package cudafake_test

import (
	"bytes"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// proc is one fake process with its device 0 context and one stream.
type proc struct {
	t   *testing.T
	d   *cudafake.Driver
	ctx cuda.Context
	s   cuda.Stream
}

func newProc(t *testing.T, w *cudafake.World) *proc {
	t.Helper()
	p := &proc{t: t, d: w.Process()}
	t.Cleanup(func() { p.d.Close() })
	var err error
	p.ctx, err = p.d.PrimaryContext(0)
	p.must(err)
	p.s, err = p.d.StreamCreate(p.ctx)
	p.must(err)
	return p
}

func (p *proc) must(err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) alloc(n uint64) cuda.DevicePtr {
	p.t.Helper()
	a, err := p.d.MemAlloc(p.ctx, n)
	p.must(err)
	return a
}

func (p *proc) pinned(n uint64) []byte {
	p.t.Helper()
	b, err := p.d.HostAlloc(p.ctx, n)
	p.must(err)
	return b
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*31 + seed
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{})
	p := newProc(t, w)
	const n = 10000
	src, dst := p.pinned(n), p.pinned(n)
	copy(src, pattern(n, 3))
	a, b := p.alloc(n), p.alloc(n)
	p.must(p.d.CopyHtoD(p.ctx, a, src, p.s))
	p.must(p.d.CopyDtoD(p.ctx, b+100, a+100, n-100, p.s))
	p.must(p.d.CopyDtoH(p.ctx, dst[100:], b+100, p.s))
	p.must(p.d.StreamSynchronize(p.ctx, p.s))
	if !bytes.Equal(dst[100:], src[100:]) || !bytes.Equal(dst[:100], make([]byte, 100)) {
		t.Fatal("round trip host -> device -> device -> host: wrong bytes")
	}
	st := w.Stats()
	if st.CopiesHtoD != 1 || st.CopiesDtoD != 1 || st.CopiesDtoH != 1 || st.BytesCopied != 3*n-200 || st.PageableCopies != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Pageable host memory works and is counted; fresh memory is not
	// zeroed.
	fresh := make([]byte, 8)
	p.must(p.d.CopyDtoH(p.ctx, fresh, b, p.s))
	p.must(p.d.StreamSynchronize(p.ctx, p.s))
	if !bytes.Equal(fresh, bytes.Repeat([]byte{cudafake.Garbage}, 8)) {
		t.Fatalf("fresh device memory reads %x, want the stand-in's garbage", fresh)
	}
	if st := w.Stats(); st.PageableCopies != 1 || st.LiveAllocs != 2 || st.LiveBytes != 2*n {
		t.Fatalf("stats %+v", st)
	}
}

// TestAsync: a copy runs after the call that queued it returned, and the
// stream says done only when it has.
func TestAsync(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{})
	p := newProc(t, w)
	src, dst := p.pinned(64), p.pinned(64)
	copy(src, pattern(64, 9))
	a := p.alloc(64)
	release := w.Hold()
	p.must(p.d.CopyHtoD(p.ctx, a, src, p.s))
	p.must(p.d.CopyDtoH(p.ctx, dst, a, p.s))
	if done, err := p.d.StreamQuery(p.ctx, p.s); done || err != nil {
		t.Fatalf("StreamQuery while held = %v, %v; want false, nil", done, err)
	}
	if !bytes.Equal(dst, make([]byte, 64)) {
		t.Fatal("a held copy wrote")
	}
	release()
	release() // idempotent
	p.must(p.d.StreamSynchronize(p.ctx, p.s))
	if done, err := p.d.StreamQuery(p.ctx, p.s); !done || err != nil {
		t.Fatalf("StreamQuery after sync = %v, %v", done, err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("copies in order on one stream: wrong bytes")
	}
}

func TestIPCAcrossProcesses(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{})
	owner, peer := newProc(t, w), newProc(t, w)
	const n = 4096
	buf := owner.pinned(n)
	copy(buf, pattern(n, 5))
	a := owner.alloc(n)
	owner.must(owner.d.CopyHtoD(owner.ctx, a, buf, owner.s))
	owner.must(owner.d.StreamSynchronize(owner.ctx, owner.s))
	h, err := owner.d.IPCGetMemHandle(owner.ctx, a)
	owner.must(err)
	if _, err := owner.d.IPCGetMemHandle(owner.ctx, a+8); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Fatalf("handle of an interior pointer: %v", err)
	}

	// Wrong handles fail without mapping anything.
	forged := h
	forged[20] ^= 1
	if _, err := peer.d.IPCOpenMemHandle(peer.ctx, forged); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Fatalf("forged handle: %v", err)
	}
	other := newProc(t, cudafake.NewWorld(cudafake.Config{}))
	if _, err := other.d.IPCOpenMemHandle(other.ctx, h); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Fatalf("another host's handle: %v", err)
	}
	if _, err := owner.d.IPCOpenMemHandle(owner.ctx, h); !errors.Is(err, cuda.ErrInvalidContext) {
		t.Fatalf("own handle: %v", err)
	}

	pa, err := peer.d.IPCOpenMemHandle(peer.ctx, h)
	peer.must(err)
	if pa == a {
		t.Fatal("the opened address equals the owner's: address spaces are not apart")
	}
	if _, err := peer.d.IPCOpenMemHandle(peer.ctx, h); !errors.Is(err, cuda.ErrAlreadyMapped) {
		t.Fatalf("second open: %v", err)
	}
	// The opened allocation's extent, from any address inside it.
	if base, size, err := peer.d.MemAddressRange(peer.ctx, pa+100); err != nil || base != pa || size != n {
		t.Fatalf("MemAddressRange inside the opened memory = %#x, %d, %v; want %#x, %d", base, size, err, pa, n)
	}
	if _, _, err := peer.d.MemAddressRange(peer.ctx, pa+n); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Fatalf("MemAddressRange past the opened memory: %v", err)
	}
	// The peer copies out of the owner's memory into its own.
	mine, out := peer.alloc(n), peer.pinned(n)
	peer.must(peer.d.CopyDtoD(peer.ctx, mine, pa, n, peer.s))
	peer.must(peer.d.CopyDtoH(peer.ctx, out, mine, peer.s))
	peer.must(peer.d.StreamSynchronize(peer.ctx, peer.s))
	if !bytes.Equal(out, buf) {
		t.Fatal("copy out of IPC memory: wrong bytes")
	}
	if st := w.Stats(); st.IPCOpens != 1 || st.LiveIPC != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := peer.d.MemFree(peer.ctx, pa); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Fatalf("MemFree of opened memory: %v", err)
	}
	peer.must(peer.d.IPCCloseMemHandle(peer.ctx, pa))
	if err := peer.d.IPCCloseMemHandle(peer.ctx, pa); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Fatalf("second close: %v", err)
	}
	owner.must(owner.d.MemFree(owner.ctx, a))
	if _, err := peer.d.IPCOpenMemHandle(peer.ctx, h); !errors.Is(err, cuda.ErrMapFailed) {
		t.Fatalf("handle of freed memory: %v", err)
	}
	if st := w.Stats(); st.LiveIPC != 0 || st.IPCCloses != 1 || st.FreedWhileOpen != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFreedUnderCopy: memory freed by its owner while another process's
// copy of it is in flight fails that copy on its stream, and the stand-in
// counts the owner's mistake.
func TestFreedUnderCopy(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{})
	owner, peer := newProc(t, w), newProc(t, w)
	a := owner.alloc(64)
	h, err := owner.d.IPCGetMemHandle(owner.ctx, a)
	owner.must(err)
	pa, err := peer.d.IPCOpenMemHandle(peer.ctx, h)
	peer.must(err)
	dst := peer.pinned(64)
	release := w.Hold()
	peer.must(peer.d.CopyDtoH(peer.ctx, dst, pa, peer.s))
	owner.must(owner.d.MemFree(owner.ctx, a))
	release()
	if err := peer.d.StreamSynchronize(peer.ctx, peer.s); !errors.Is(err, cuda.ErrIllegalAddress) {
		t.Fatalf("Synchronize after the memory was freed under the copy: %v", err)
	}
	if _, err := peer.d.StreamQuery(peer.ctx, peer.s); !errors.Is(err, cuda.ErrIllegalAddress) {
		t.Fatalf("the stream's error is not sticky: %v", err)
	}
	if st := w.Stats(); st.FreedWhileOpen != 1 || st.FailedCopies != 1 || st.CopiesDtoH != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRefusals(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 1 << 22})
	p := newProc(t, w)
	a := p.alloc(100)
	host := p.pinned(200)
	for name, err := range map[string]error{
		"past the end":   p.d.CopyHtoD(p.ctx, a, host[:101], p.s),
		"offset past":    p.d.CopyDtoH(p.ctx, host[:1], a+100, p.s),
		"guard gap":      p.d.CopyDtoD(p.ctx, a+(1<<20), a, 1, p.s),
		"length wraps":   p.d.CopyDtoD(p.ctx, a+1, a, ^uint64(0), p.s),
		"below the heap": p.d.CopyDtoH(p.ctx, host[:1], 1, p.s),
		"free interior":  p.d.MemFree(p.ctx, a+1),
		"zero alloc":     func() error { _, err := p.d.MemAlloc(p.ctx, 0); return err }(),
	} {
		if !errors.Is(err, cuda.ErrInvalidValue) {
			t.Errorf("%s: %v, want ErrInvalidValue", name, err)
		}
	}
	if _, err := p.d.MemAlloc(p.ctx, 1<<22); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Errorf("past capacity: %v", err)
	}
	if err := p.d.CopyHtoD(p.ctx, a, host[:1], p.s+7); !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Errorf("unknown stream: %v", err)
	}
	if _, err := p.d.MemAlloc(cuda.Context(9), 1); !errors.Is(err, cuda.ErrInvalidContext) {
		t.Errorf("unknown context: %v", err)
	}
	if _, err := p.d.PrimaryContext(1); !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("device 1 of 1: %v", err)
	}
	if _, err := p.d.DmaBufFD(p.ctx, a, 1<<21); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Errorf("DmaBufFD: %v, want ErrNotSupported", err)
	}
	if err := p.d.HostRegister(p.ctx, host[10:20]); !errors.Is(err, cuda.ErrHostRegistered) {
		t.Errorf("registering pinned memory: %v", err)
	}
	if err := p.d.HostFree(p.ctx, host[:10]); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("HostFree of part: %v", err)
	}
	// None of the refused copies ran.
	p.must(p.d.StreamSynchronize(p.ctx, p.s))
	if st := w.Stats(); st.CopiesHtoD+st.CopiesDtoH+st.CopiesDtoD != 0 {
		t.Fatalf("a refused copy ran: %+v", st)
	}
	reg := make([]byte, 64)
	p.must(p.d.HostRegister(p.ctx, reg))
	p.must(p.d.CopyDtoH(p.ctx, reg[8:16], a, p.s))
	p.must(p.d.StreamSynchronize(p.ctx, p.s))
	p.must(p.d.HostUnregister(p.ctx, reg))
	if st := w.Stats(); st.PageableCopies != 0 || st.CopiesDtoH != 1 {
		t.Fatalf("a copy into registered memory counted pageable: %+v", st)
	}
}

// TestClose: a process's exit stops its streams, closes what it opened and
// frees what it allocated; the other process's memory stays.
func TestClose(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{})
	owner, peer := newProc(t, w), newProc(t, w)
	a := owner.alloc(64)
	h, err := owner.d.IPCGetMemHandle(owner.ctx, a)
	owner.must(err)
	_, err = peer.d.IPCOpenMemHandle(peer.ctx, h)
	peer.must(err)
	peer.alloc(128)
	peer.pinned(16)
	peer.must(peer.d.Close())
	peer.must(peer.d.Close())
	st := w.Stats()
	if st.LiveIPC != 0 || st.LiveAllocs != 1 || st.LiveBytes != 64 || st.Streams != 1 || st.LiveHost != 0 {
		t.Fatalf("after the peer's exit: %+v", st)
	}
	if _, err := peer.d.MemAlloc(peer.ctx, 1); !errors.Is(err, cuda.ErrInvalidContext) {
		t.Fatalf("MemAlloc after Close: %v", err)
	}
	owner.must(owner.d.StreamDestroy(owner.ctx, owner.s))
	if err := owner.d.StreamDestroy(owner.ctx, owner.s); !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Fatalf("second StreamDestroy: %v", err)
	}
	owner.must(owner.d.Close())
	if st := w.Stats(); st.LiveAllocs != 0 || st.Streams != 0 || st.FreedWhileOpen != 0 {
		t.Fatalf("after the owner's exit: %+v", st)
	}
}
