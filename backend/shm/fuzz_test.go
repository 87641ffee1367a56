//go:build linux

package shm

import (
	"bytes"
	"context"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The fuzz targets of every decoder of bytes from a peer: the route info
// and answer (control plane), the initiator's side of the socket (hello,
// welcome, the owner's replies and the state table it maps); the owner's
// side is fuzzed through a real owner (fuzz_owner_test.go). .ci/fuzz-brief
// runs each briefly.

// fuzzBound bounds every wait of a fuzz input: a hang is a finding.
const fuzzBound = 10 * time.Second

// FuzzDecodeInfo: route info decodes or is refused with an error, and what
// decodes encodes back to the same bytes (the decoder takes nothing twice
// and leaves nothing out).
func FuzzDecodeInfo(f *testing.F) {
	i := routeInfo{pid: 7, uid: 1000, fbKind: "tcp", fb: []byte{1, 2, 3}}
	f.Add(i.encode())
	f.Add((&routeInfo{}).encode())
	f.Add([]byte{protoVersion})
	f.Fuzz(func(t *testing.T, p []byte) {
		i, err := decodeInfo(p)
		if err != nil {
			return
		}
		if len(i.fb) > maxFallbackInfo {
			t.Fatalf("fallback info of %d bytes accepted", len(i.fb))
		}
		if got := i.encode(); !bytes.Equal(got, p) {
			t.Fatalf("decode then encode: %x, want %x", got, p)
		}
	})
}

// FuzzDecodeAnswer: the same for the owner's answer, which must name a
// socket.
func FuzzDecodeAnswer(f *testing.F) {
	a := routeAnswer{socket: "rdmamgr-shm-1", fb: []byte{9}}
	f.Add(a.encode())
	f.Add([]byte{protoVersion, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		a, err := decodeAnswer(p)
		if err != nil {
			return
		}
		if a.socket == "" || len(a.fb) > maxFallbackInfo {
			t.Fatalf("answer %+v accepted", a)
		}
		if got := a.encode(); !bytes.Equal(got, p) {
			t.Fatalf("decode then encode: %x, want %x", got, p)
		}
	})
}

// FuzzStateTable: whatever the owner wrote into a slot of the state table
// the initiator maps, a copy enters only a slot that is alive, holds the
// region it asked for and has no lease in the past; a refused copy leaves
// the in-flight count as it found it, an admitted one raises it by one.
func FuzzStateTable(f *testing.F) {
	f.Add(uint32(1), uint64(5), uint64(5), uint64(stAlive), uint64(0), uint64(0))
	f.Add(uint32(2), uint64(5), uint64(6), uint64(stAlive), uint64(1), uint64(3))
	f.Add(uint32(255), uint64(1), uint64(1), uint64(stRevoked), ^uint64(0), ^uint64(0))
	f.Fuzz(func(t *testing.T, slot uint32, want, id, state, lease, inFlight uint64) {
		slot = 1 + slot%255
		tbl := &table{mem: make([]byte, (slot+1)*slotSize)}
		tbl.word(slot, wID).Store(id)
		tbl.word(slot, wState).Store(state)
		tbl.word(slot, wLease).Store(lease)
		tbl.word(slot, wInFlight).Store(inFlight)
		st := tbl.enter(slot, want)
		alive := id == want && state == stAlive && (lease == 0 || uint64(nanotime()) <= lease)
		switch {
		case st == stAlive && !alive:
			t.Fatalf("entered slot %d (id %d, want %d, state %d, lease %d)", slot, id, want, state, lease)
		case st == stAlive:
			if n := tbl.word(slot, wInFlight).Load(); n != inFlight+1 {
				t.Fatalf("in flight %d after enter, want %d", n, inFlight+1)
			}
			tbl.leave(slot)
		case alive && st != stExpired: // the lease may run out between the two reads
			t.Fatalf("refused slot %d with %d (id %d, state %d, lease %d)", slot, st, id, state, lease)
		}
		if n := tbl.word(slot, wInFlight).Load(); n != inFlight {
			t.Fatalf("in flight %d after, want %d", n, inFlight)
		}
	})
}

// fd kinds a fuzzed packet can carry.
const (
	fdNone     = iota
	fdTable    // a proper state table (sealed memfd of the table's size)
	fdSealed   // a sealed memfd of one page
	fdUnsealed // a memfd anyone can shrink
	fdPipe     // not a memory file at all
	fdKinds
)

// fuzzFD makes an fd of kind k (-1 for fdNone); the caller closes it.
func fuzzFD(t *testing.T, k byte) int {
	t.Helper()
	switch k % fdKinds {
	case fdTable:
		fd, tbl, err := newTable()
		if err != nil {
			t.Fatal(err)
		}
		tbl.close()
		return fd
	case fdSealed, fdUnsealed:
		flags := unix.MFD_CLOEXEC
		if k%fdKinds == fdSealed {
			flags |= unix.MFD_ALLOW_SEALING
		}
		fd, err := unix.MemfdCreate("rdmamgr-fuzz", flags)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, 4096); err != nil {
			t.Fatal(err)
		}
		if k%fdKinds == fdSealed {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	case fdPipe:
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[1])
		return p[0]
	}
	return -1
}

// socketPair returns the two ends of a SOCK_SEQPACKET pair, closed at the
// end of the test.
func socketPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "shm-fuzz")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// sendFuzzed writes p with an fd of kind k (closing its own copy).
func sendFuzzed(t *testing.T, c *net.UnixConn, p []byte, k byte) {
	t.Helper()
	fd := fuzzFD(t, k)
	if fd >= 0 {
		defer unix.Close(fd)
	}
	_ = c.SetWriteDeadline(time.Now().Add(fuzzBound))
	_ = writePacket(c, p, fd)
}

// fuzzBackend is a backend that is not started (New does no I/O).
func fuzzBackend(t *testing.T) (*Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(backendtest.OwnerA, buffer.Limits{})
	t.Cleanup(func() { reg.Close(context.Background()) })
	b, err := New(Config{}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, reg
}

// FuzzInitiatorHandshake: an owner that answers the initiator's connection
// with any hello and any welcome, carrying any kind of fd, gets an error
// or a state table of exactly the table's size; never a panic.
func FuzzInitiatorHandshake(f *testing.F) {
	hello := append([]byte{msgHello, protoVersion}, make([]byte, backend.NonceSize)...)
	f.Add(hello, welcome(rdmapb.Code_OK), byte(fdTable))
	f.Add(hello, welcome(rdmapb.Code_OK), byte(fdSealed))
	f.Add(hello, welcome(rdmapb.Code_OK), byte(fdUnsealed))
	f.Add(hello, welcome(rdmapb.Code_OK), byte(fdPipe))
	f.Add(hello, welcome(rdmapb.Code_UNAUTHENTICATED), byte(fdNone))
	f.Add([]byte{msgHello}, []byte{msgWelcome, 0, 0}, byte(fdTable))
	f.Fuzz(func(t *testing.T, hello, welcomeMsg []byte, k byte) {
		if len(hello) > maxPacket || len(welcomeMsg) > maxPacket {
			return // a packet the socket truncates: not what the owner can send whole
		}
		b, _ := fuzzBackend(t)
		initiator, owner := socketPair(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sendFuzzed(t, owner, hello, fdNone)
			buf := make([]byte, maxPacket)
			_ = owner.SetReadDeadline(time.Now().Add(fuzzBound))
			if _, _, _, _, err := owner.ReadMsgUnix(buf, nil); err != nil {
				return // the initiator refused the hello
			}
			sendFuzzed(t, owner, welcomeMsg, k)
		}()
		_ = initiator.SetDeadline(time.Now().Add(fuzzBound))
		tbl, err := b.handshake(initiator, &routeAnswer{})
		initiator.Close()
		<-done
		if err != nil {
			return
		}
		defer tbl.close()
		if len(tbl.mem) != tableSlots*slotSize {
			t.Fatalf("table of %d bytes accepted", len(tbl.mem))
		}
	})
}

// FuzzInitiatorReplies: a route whose owner answers its map request with
// any packets (each with any kind of fd) and whose state table holds any
// bytes fails or completes the operation, never panics, and closes
// within a bound. The owner hangs up after its packets, so an input that
// answers nothing ends at once.
//
// The input is packets, each a length byte, an fd kind byte and the bytes;
// table seeds the first slots of the state table.
func FuzzInitiatorReplies(f *testing.F) {
	mapped := func(req uint64, code, slot uint32, off, n uint64, acc buffer.Access) []byte {
		m := mappedMsg{req: req, code: code, slot: slot, off: off, len: n, access: acc}
		return m.encode()
	}
	pkt := func(k byte, p []byte) []byte { return append([]byte{byte(len(p)), k}, p...) }
	alive := make([]byte, 2*slotSize)
	alive[slotSize], alive[slotSize+8] = 1, stAlive // slot 1: region 1, alive
	f.Add(pkt(fdSealed, mapped(1, 0, 1, 0, 4096, buffer.AccessReadWrite)), alive)
	f.Add(pkt(fdSealed, mapped(1, 0, 1, 4000, 4096, buffer.AccessReadWrite)), alive)
	f.Add(pkt(fdUnsealed, mapped(1, 0, 1, 0, 4096, buffer.AccessReadWrite)), alive)
	f.Add(pkt(fdPipe, mapped(1, 0, 1, 0, 4096, buffer.AccessRead)), alive)
	f.Add(pkt(fdNone, mapped(1, 0, tableSlots, 0, 4096, buffer.AccessReadWrite)), alive)
	f.Add(append(pkt(fdNone, ackMsg(1, uint32(rdmapb.Code_RELEASED))), pkt(fdNone, slotMsg(msgGone, 1, 1))...), []byte{})
	f.Add(pkt(fdNone, []byte{99}), []byte{})
	f.Add(append(pkt(fdNone, slotMsg(msgCut, 1, 1)), pkt(fdSealed, mapped(1, 0, 1, 0, 4096, buffer.AccessReadWrite))...), alive)
	f.Add(pkt(fdNone, slotMsg(msgCut, 1, 1)[:9]), alive)
	dev := mappedDeviceMsg{req: 1, slot: 1, len: 4096, access: buffer.AccessReadWrite}
	f.Add(pkt(fdNone, dev.encode()), alive)        // a device reply to a host request
	f.Add(pkt(fdSealed, dev.encode()[:40]), alive) // truncated, with a fd
	f.Fuzz(func(t *testing.T, packets, tableBytes []byte) {
		b, reg := fuzzBackend(t)
		initiator, owner := socketPair(t)
		fd, tbl, err := newTable()
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		copy(tbl.mem, tableBytes)
		r := newRoute(b, backendtest.OwnerB, initiator, tbl, nil)
		defer func() {
			closed := make(chan struct{})
			go func() { r.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(fuzzBound):
				t.Fatal("route Close hangs")
			}
		}()
		// The owner reads the map request, sends the packets and hangs up.
		go func() {
			defer owner.Close()
			buf := make([]byte, maxPacket)
			_ = owner.SetReadDeadline(time.Now().Add(fuzzBound))
			if _, _, _, _, err := owner.ReadMsgUnix(buf, nil); err != nil {
				return
			}
			for p := packets; len(p) >= 2; {
				n := min(int(p[0]), len(p)-2)
				sendFuzzed(t, owner, p[2:2+n], p[1])
				p = p[2+n:]
			}
		}()
		_, local := backendtest.Alloc(t, reg, 64, buffer.AccessReadWrite)
		rec := backendtest.NewRecorder(1)
		wr := &backend.WorkRequest{Op: backend.OpRead, Local: local, Deadline: time.Now().Add(time.Second), Done: rec,
			Remote: buffer.Buffer{OwnerID: backendtest.OwnerB, Region: 1, Length: 64, Access: buffer.AccessReadWrite}}
		if err := r.Post(wr); err != nil {
			return
		}
		select {
		case <-rec.Results():
		case <-r.Done():
			if err := r.Err(); err == nil {
				t.Fatalf("route down with %v", err)
			}
		case <-time.After(fuzzBound):
			t.Fatal("the operation neither completed nor failed")
		}
	})
}
