//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// Issue 24, row 4: "exported means only that region". A peer of a user
// the owner serves, speaking the socket protocol itself, maps buffers it
// holds keys for and then does what it likes with what it was passed.
// Before, a 4 KiB buffer came as its whole 1 MiB slab's memfd, read-write:
// every sub-attack below got through.

// readKeep is read, keeping the fds it carried (closed when the test
// ends).
func (r *rawConn) readKeep(t *testing.T) ([]byte, []int) {
	t.Helper()
	r.c.SetReadDeadline(time.Now().Add(timeout))
	n, oobn, _, _, err := r.c.ReadMsgUnix(r.buf, r.oob)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(r.oob[:oobn]); err == nil {
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return append([]byte(nil), r.buf[:n]...), fds
}

// hostilePeer is an authenticated raw connection and its state table.
type hostilePeer struct {
	*rawConn
	table []byte
}

func newHostilePeer(t *testing.T, b *shm.Backend) *hostilePeer {
	t.Helper()
	r := dialRaw(t, b)
	r.hello(t)
	r.auth(t, token(t, b, os.Getpid(), os.Getuid()), nil)
	m, fds := r.readKeep(t)
	if len(m) != 9 || m[0] != shm.MsgWelcome || len(fds) != 1 {
		t.Fatalf("welcome %x with %d fds", m, len(fds))
	}
	tbl := mapAll(t, fds[0], unix.PROT_READ|unix.PROT_WRITE)
	return &hostilePeer{rawConn: r, table: tbl}
}

// mapped is what a map request got.
type mapped struct {
	fd        int
	slot      uint32
	off, n    uint64
	fileBytes int64
}

// mapRegion asks for h with need and returns the fd passed.
func (p *hostilePeer) mapRegion(t *testing.T, h buffer.Buffer, need buffer.Access) mapped {
	t.Helper()
	p.write(t, shm.EncodeMap(9, h.Region, h.Key, byte(need)))
	m, fds := p.readKeep(t)
	for len(m) > 0 && m[0] == shm.MsgGone { // news of a region cut before
		m, fds = p.readKeep(t)
	}
	if len(m) != 34 || m[0] != shm.MsgMapped || binary.LittleEndian.Uint32(m[9:]) != 0 || len(fds) != 1 {
		t.Fatalf("map region %d: reply %x with %d fds", h.Region, m, len(fds))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	return mapped{fd: fds[0], slot: binary.LittleEndian.Uint32(m[13:]), off: binary.LittleEndian.Uint64(m[17:]),
		n: binary.LittleEndian.Uint64(m[25:]), fileBytes: st.Size}
}

// mapAll maps all of fd's file with prot, shared; unmapped at the end.
func mapAll(t *testing.T, fd, prot int) []byte {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), prot, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", st.Size, err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// TestAttackExportOnlyThatRegion: the five sub-attacks of row 4, each
// refused or harmless.
func TestAttackExportOnlyThatRegion(t *testing.T) {
	p := newPair(t, shm.Config{})
	peer := newHostilePeer(t, p.b)
	// Five 4 KiB buffers from one slab: the attacker holds the key of the
	// first only; the others are other peers'.
	var hs []buffer.Buffer
	var mems [][]byte
	for i := range 5 {
		h, mem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
		for j := range mem {
			mem[j] = byte(i + 1)
		}
		hs, mems = append(hs, h), append(mems, mem)
	}
	mine := peer.mapRegion(t, hs[0], buffer.AccessWrite)

	t.Run("maps only its own pages", func(t *testing.T) {
		if mine.fileBytes != 4096 || mine.off != 0 || mine.n != 4096 {
			t.Fatalf("a 4 KiB buffer came as a file of %d bytes (region at %d, %d bytes): want its one page", mine.fileBytes, mine.off, mine.n)
		}
	})

	t.Run("cannot write other buffers", func(t *testing.T) {
		mem := mapAll(t, mine.fd, unix.PROT_READ|unix.PROT_WRITE)
		for i := range mem {
			mem[i] = 0xEE
		}
		if mems[0][0] != 0xEE || mems[0][4095] != 0xEE {
			t.Fatal("its own buffer does not see its writes")
		}
		for i, m := range mems[1:] {
			if !bytes.Equal(m, bytes.Repeat([]byte{byte(i + 2)}, 4096)) {
				t.Fatalf("buffer %d of another peer was written", i+1)
			}
		}
	})

	t.Run("read-only stays read-only", func(t *testing.T) {
		h, mem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessRead)
		for i := range mem {
			mem[i] = 0x5A
		}
		ro := peer.mapRegion(t, h, buffer.AccessRead)
		if _, err := unix.Mmap(ro.fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
			t.Fatal("read-only buffer mapped writable")
		}
		if _, err := unix.Pwrite(ro.fd, []byte{1}, 0); err == nil {
			t.Fatal("read-only buffer written through its fd")
		}
		// Reopening the fd read-write (/proc/self/fd) gives no more: the
		// memfd is sealed against writing.
		fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", ro.fd), unix.O_RDWR, 0)
		if err == nil {
			defer unix.Close(fd)
			if _, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
				t.Fatal("read-only buffer mapped writable through a reopened fd")
			}
			if _, err := unix.Pwrite(fd, []byte{1}, 0); err == nil {
				t.Fatal("read-only buffer written through a reopened fd")
			}
		}
		if !bytes.Equal(mem, bytes.Repeat([]byte{0x5A}, 4096)) {
			t.Fatal("read-only buffer changed")
		}
		// The owner itself still writes it.
		mem[0] = 0x5B
		if got := mapAll(t, ro.fd, unix.PROT_READ); got[0] != 0x5B {
			t.Fatal("the peer's read-only view does not see the owner's write")
		}
	})

	t.Run("revoked means gone", func(t *testing.T) {
		h, mem := backendtest.Alloc(t, p.regB, 16<<10, buffer.AccessReadWrite)
		w := peer.mapRegion(t, h, buffer.AccessWrite)
		view := mapAll(t, w.fd, unix.PROT_READ|unix.PROT_WRITE)
		view[0] = 0x11
		if mem[0] != 0x11 {
			t.Fatal("mapping does not reach the buffer before Revoke")
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := p.regB.Revoke(ctx, h); err != nil {
			t.Fatal(err)
		}
		for i := range view { // the peer keeps writing through what it kept
			view[i] = 0x22
		}
		if mem[0] != 0x11 || bytes.Count(mem, []byte{0x22}) != 0 {
			t.Fatal("a write through the peer's mapping reached the buffer after Revoke")
		}
		mem[1] = 0x33 // the owner's own use goes on
		if view[1] == 0x33 {
			t.Fatal("the peer's mapping still shows the buffer after Revoke")
		}
		if _, err := p.regB.Bytes(h); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("state table scribbled", func(t *testing.T) {
		h, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
		peer.mapRegion(t, h, buffer.AccessWrite)
		for i := range peer.table { // ids, states, leases, counts in flight: garbage
			peer.table[i] = 0xFF
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := p.regB.Release(ctx, h); err != nil {
			t.Fatalf("release of a buffer the scribbler mapped: %v", err)
		}
		checkServes(t, p) // other peers' routes are untouched
		st := p.b.ServedByPeer()
		if s := st[backendtest.OwnerA]; s.Ops > 1<<40 {
			t.Fatalf("served figures of peer A taken over: %+v", s)
		}
	})
}
