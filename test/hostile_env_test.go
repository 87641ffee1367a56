//go:build linux

// TestHostile's environment: setting it up, checking after each case that
// the daemon's memory is unchanged and that it still serves, raw data
// connections to it, and small helpers the cases share.

package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/buffer"
)

func newHostileEnv(t *testing.T) *hostileEnv {
	d := startDaemon(t)
	h := &hostileEnv{d: d, r: newRand(t)}
	h.dataAddr = dataAddrFromStatus(t, d)
	h.rw = remoteBuffer(t, d, hostileBufSize, buffer.AccessReadWrite)
	h.ro = remoteBuffer(t, d, hostileBufSize, buffer.AccessRead)
	h.scratch = remoteBuffer(t, d, hostileOpSize, buffer.AccessReadWrite)
	h.src, h.srcMem = localBuffer(t, hostileBufSize)
	h.dst, h.dstMem = localBuffer(t, hostileBufSize)
	h.qp = queuePair(t, d)

	// Seed the read-write buffer with the pattern.
	h.pattern = make([]byte, hostileBufSize)
	fill(h.r, h.pattern)
	copy(h.srcMem, h.pattern)
	if err := wait(h.qp.Put(context.Background(), h.src, h.rw)); err != nil {
		t.Fatalf("seed: %v", err)
	}
	// From here the source buffer holds different bytes, so a hostile
	// put that wrongly lands shows.
	fill(h.r, h.srcMem)
	h.checkIntact(t)
	return h
}

// dataAddrFromStatus runs `rdmamgr status` (another process) and returns
// the data address on its "backend tcp, data HOST:PORT" line.
func dataAddrFromStatus(t *testing.T, d *daemon) string {
	t.Helper()
	out, err := runStatus(d)
	if err != nil {
		t.Fatalf("rdmamgr status: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if _, addr, ok := strings.Cut(line, ", data "); ok && strings.HasPrefix(line, "backend ") && strings.Contains(line, "tcp") {
			addr = strings.TrimSpace(addr)
			if _, _, err := net.SplitHostPort(addr); err != nil {
				t.Fatalf("status data address %q: %v", addr, err)
			}
			return addr
		}
	}
	t.Fatalf("no \"backend tcp, data HOST:PORT\" line in status output:\n%s", out)
	return ""
}

func (h *hostileEnv) srcSlice(off, n uint64) buffer.Buffer { return slice(h.src, off, n) }
func (h *hostileEnv) dstSlice(off, n uint64) buffer.Buffer { return slice(h.dst, off, n) }

// checkIntact reads both daemon buffers back: rw must hold the pattern, ro
// must be zero.
func (h *hostileEnv) checkIntact(t *testing.T) {
	t.Helper()
	clear(h.dstMem)
	if err := wait(h.qp.Get(context.Background(), h.dst, h.rw)); err != nil {
		t.Fatalf("read back the read-write buffer: %v", err)
	}
	if !bytes.Equal(h.dstMem, h.pattern) {
		t.Errorf("the daemon's read-write buffer changed: %s", firstDiff(h.dstMem, h.pattern))
	}
	fill(h.r, h.dstMem)
	if err := wait(h.qp.Get(context.Background(), h.dst, h.ro)); err != nil {
		t.Fatalf("read back the read-only buffer: %v", err)
	}
	if !bytes.Equal(h.dstMem, make([]byte, hostileBufSize)) {
		t.Errorf("the daemon's read-only buffer changed: %s", firstDiff(h.dstMem, make([]byte, hostileBufSize)))
	}
}

// checkServing moves fresh bytes through the scratch buffer and asks for
// the daemon's status.
func (h *hostileEnv) checkServing(t *testing.T) {
	t.Helper()
	h.broken = true // until proven otherwise
	src, dst := h.srcSlice(hostileBufSize-hostileOpSize, hostileOpSize), h.dstSlice(0, hostileOpSize)
	sm, dm := h.srcMem[hostileBufSize-hostileOpSize:], h.dstMem[:hostileOpSize]
	fill(h.r, sm)
	clear(dm)
	if err := wait(h.qp.Put(context.Background(), src, h.scratch)); err != nil {
		t.Fatalf("the daemon stopped serving puts: %v", err)
	}
	if err := wait(h.qp.Get(context.Background(), dst, h.scratch)); err != nil {
		t.Fatalf("the daemon stopped serving gets: %v", err)
	}
	if !bytes.Equal(dm, sm) {
		t.Fatalf("put then get through the daemon: %s", firstDiff(dm, sm))
	}
	ctx := testCtx(t, 30*time.Second)
	st, err := h.d.client().Status(ctx)
	if err != nil {
		t.Fatalf("the daemon stopped answering status: %v", err)
	}
	if st.DataAddr != h.dataAddr {
		t.Fatalf("status data address %q, was %q", st.DataAddr, h.dataAddr)
	}
	h.broken = false
}

// authConn opens a data connection authenticated with a token from a
// hand-made route handshake.
func (h *hostileEnv) authConn(t *testing.T, ctx context.Context) net.Conn {
	t.Helper()
	addr, toks, err := rawRoute(ctx, h.d, 1)
	if err != nil {
		t.Fatalf("raw handshake: %v", err)
	}
	if addr != h.dataAddr {
		t.Fatalf("handshake data address %q, status says %q", addr, h.dataAddr)
	}
	c := dataConn(t, addr)
	if err := hello(c, wireVersion, toks[0]); err != nil {
		t.Fatalf("hello with a fresh token: %v", err)
	}
	return c
}

// rawReadPattern reads [off, off+n) of rw over a raw connection and checks
// it against the pattern.
func (h *hostileEnv) rawReadPattern(c net.Conn, wrid, off uint64, n uint32) error {
	if _, err := c.Write(frame(opRead, n, wrid, h.rw.Region, off, h.rw.Key)); err != nil {
		return err
	}
	p, err := response(c, opRead, wrid)
	if err != nil {
		return err
	}
	if want := h.pattern[off : off+uint64(n)]; !bytes.Equal(p, want) {
		return fmt.Errorf("raw read: %s", firstDiff(p, want))
	}
	return nil
}

// requestQueuePair asks the test's manager for a queue pair to peer and
// releases it if it comes.
func requestQueuePair(ctx context.Context, peer *protoactor.PID) error {
	qp, err := local.mgr.Client().RequestQueuePair(ctx, peer)
	if err != nil {
		return err
	}
	qp.Release()
	return fmt.Errorf("got a queue pair to %s", peer)
}

// expect checks a secondary outcome of a case.
func expect(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func isAny(err error, want []error) bool {
	for _, w := range want {
		if errors.Is(err, w) {
			return true
		}
	}
	return false
}
