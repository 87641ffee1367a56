//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestDecodeMappedDevice: a device map reply round-trips, and every field
// the initiator can check without the driver is refused out of bounds
// with ErrProtocol, as are truncated and trailing bytes.
func TestDecodeMappedDevice(t *testing.T) {
	good := mappedDeviceMsg{req: 7, slot: 3, len: 3 << 20, access: buffer.AccessReadWrite, dev: 1}
	good.handle[0], good.handle[63] = 0xAB, 0xCD
	dec := func(p []byte) (mappedDeviceMsg, error) {
		d := newDecoder(p[1:])
		m := decodeMappedDevice(&d)
		return m, d.end()
	}
	if m, err := dec(good.encode()); err != nil || m != good {
		t.Fatalf("round trip: %+v, %v", m, err)
	}
	for name, mut := range map[string]func(m *mappedDeviceMsg){
		"slot 0":         func(m *mappedDeviceMsg) { m.slot = 0 },
		"slot past":      func(m *mappedDeviceMsg) { m.slot = tableSlots },
		"length 0":       func(m *mappedDeviceMsg) { m.len = 0 },
		"length huge":    func(m *mappedDeviceMsg) { m.len = maxDeviceRegion + 1 },
		"read-only":      func(m *mappedDeviceMsg) { m.access = buffer.AccessRead },
		"unknown access": func(m *mappedDeviceMsg) { m.access |= 0x40 },
		"device 1024":    func(m *mappedDeviceMsg) { m.dev = 1024 },
	} {
		m := good
		mut(&m)
		if _, err := dec(m.encode()); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
	p := good.encode()
	for _, bad := range [][]byte{p[:len(p)-1], append(bytes.Clone(p), 0)} {
		if _, err := dec(bad); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%d bytes: %v, want ErrProtocol", len(bad), err)
		}
	}
}

// TestHostileDeviceReply: an owner that answers a device map request with
// a handle the driver does not open (forged), or with a real handle and a
// length past its allocation, gets its slot back (msgUnmap) and the
// operation goes to the fallback (none here: ErrNotShareable), with
// nothing left open. A device reply to a request without the flag fails
// the route with ErrProtocol.
func TestHostileDeviceReply(t *testing.T) {
	for _, tc := range []string{"forged", "overclaimed", "unflagged"} {
		t.Run(tc, func(t *testing.T) {
			b, reg := fuzzBackend(t)
			w := cudafake.NewWorld(cudafake.Config{})
			d, od := w.Process(), w.Process()
			defer d.Close()
			defer od.Close()
			if tc != "unflagged" {
				reg.SetCUDA(d, nil)
			}
			rep := mappedDeviceMsg{req: 1, slot: 1, len: 4096, access: buffer.AccessReadWrite}
			copy(rep.handle[:], "forged")
			if tc == "overclaimed" {
				octx, err := od.PrimaryContext(0)
				if err != nil {
					t.Fatal(err)
				}
				p, err := od.MemAlloc(octx, 4096)
				if err != nil {
					t.Fatal(err)
				}
				if rep.handle, err = od.IPCGetMemHandle(octx, p); err != nil {
					t.Fatal(err)
				}
				rep.len = 4097
			}
			initiator, owner := socketPair(t)
			fd, tbl, err := newTable()
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			r := newRoute(b, backendtest.OwnerB, initiator, tbl, nil)
			got := make(chan []byte, 2)
			go func() {
				defer owner.Close()
				buf := make([]byte, maxPacket)
				_ = owner.SetReadDeadline(time.Now().Add(fuzzBound))
				n, _, _, _, err := owner.ReadMsgUnix(buf, nil)
				if err != nil {
					return
				}
				got <- bytes.Clone(buf[:n])
				_ = writePacket(owner, rep.encode(), -1)
				if n, _, _, _, err = owner.ReadMsgUnix(buf, nil); err == nil {
					got <- bytes.Clone(buf[:n])
				}
			}()
			_, local := backendtest.Alloc(t, reg, 64, buffer.AccessReadWrite)
			rec := backendtest.NewRecorder(1)
			wr := &backend.WorkRequest{Op: backend.OpRead, Local: local, Deadline: time.Now().Add(fuzzBound), Done: rec,
				Remote: buffer.Buffer{OwnerID: backendtest.OwnerB, Region: 9, Length: 64, Access: buffer.AccessReadWrite, Location: buffer.CUDA(0)}}
			if err := r.Post(wr); err != nil {
				t.Fatal(err)
			}
			var res backendtest.Result
			select {
			case res = <-rec.Results():
			case <-time.After(fuzzBound):
				t.Fatal("no completion")
			}
			req := <-got
			if tc == "unflagged" {
				if !errors.Is(res.Err, rdmamgr.ErrProtocol) {
					t.Fatalf("device reply to a host request: %v, want ErrProtocol", res.Err)
				}
			} else {
				if req[0] != msgMap || buffer.Access(req[len(req)-1])&needDevice == 0 {
					t.Fatalf("map request %x without needDevice", req)
				}
				if !errors.Is(res.Err, ErrNotShareable) {
					t.Fatalf("operation after a %s reply: %v, want ErrNotShareable", tc, res.Err)
				}
				if back := <-got; !bytes.Equal(back, slotMsg(msgUnmap, 1, 9)) {
					t.Fatalf("owner got %x, want the slot back", back)
				}
			}
			r.Close()
			st := w.Stats()
			if opens := map[string]int{"overclaimed": 1}[tc]; st.LiveIPC != 0 || st.IPCOpens != opens || st.IPCCloses != opens {
				t.Fatalf("fake driver: %+v", st)
			}
		})
	}
}

// TestOldOwnerDeviceRequest: an owner that does not know needDevice
// refuses the unknown access bit (ACCESS_DENIED); the initiator asks again
// without it, gets NOT_SUPPORTED as from any such owner for a device
// region, and sends the operation to the fallback (none here:
// ErrNotShareable). The connection goes on.
func TestOldOwnerDeviceRequest(t *testing.T) {
	b, reg := fuzzBackend(t)
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	defer d.Close()
	reg.SetCUDA(d, nil)
	initiator, owner := socketPair(t)
	fd, tbl, err := newTable()
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	r := newRoute(b, backendtest.OwnerB, initiator, tbl, nil)
	defer r.Close()
	needs := make(chan buffer.Access, 2)
	go func() {
		defer owner.Close()
		buf := make([]byte, maxPacket)
		_ = owner.SetReadDeadline(time.Now().Add(fuzzBound))
		for _, code := range []rdmapb.Code{rdmapb.Code_ACCESS_DENIED, rdmapb.Code_NOT_SUPPORTED} {
			n, _, _, _, err := owner.ReadMsgUnix(buf, nil)
			if err != nil {
				return
			}
			dd := newDecoder(buf[1:n])
			m := decodeMap(&dd)
			needs <- m.need
			rep := mappedMsg{req: m.req, code: uint32(code)}
			_ = writePacket(owner, rep.encode(), -1)
		}
		_, _, _, _, _ = owner.ReadMsgUnix(buf, nil) // until the route closes
	}()
	_, local := backendtest.Alloc(t, reg, 64, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(1)
	wr := &backend.WorkRequest{Op: backend.OpRead, Local: local, Deadline: time.Now().Add(fuzzBound), Done: rec,
		Remote: buffer.Buffer{OwnerID: backendtest.OwnerB, Region: 9, Length: 64, Access: buffer.AccessReadWrite, Location: buffer.CUDA(0)}}
	if err := r.Post(wr); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-rec.Results():
		if !errors.Is(res.Err, ErrNotShareable) {
			t.Fatalf("operation: %v, want ErrNotShareable (the fallback's absence)", res.Err)
		}
	case <-time.After(fuzzBound):
		t.Fatal("no completion")
	}
	if first, second := <-needs, <-needs; first != buffer.AccessRead|needDevice || second != buffer.AccessRead {
		t.Fatalf("map requests asked %#x then %#x, want read with needDevice, then read", first, second)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("route failed: %v", err)
	}
}

// FuzzInitiatorDeviceReplies: an initiator with a CUDA driver asking for
// a device region gets any packets back (device replies with any handle,
// length, slot; memfd replies; refusals): the operation completes or the
// route fails, nothing panics or hangs, and no IPC mapping outlives the
// route.
func FuzzInitiatorDeviceReplies(f *testing.F) {
	pkt := func(p []byte) []byte { return append([]byte{byte(len(p))}, p...) }
	dev := mappedDeviceMsg{req: 1, slot: 1, len: 4096, access: buffer.AccessReadWrite}
	f.Add(pkt(dev.encode()), false)
	f.Add(pkt(dev.encode()), true) // a real handle (the fuzzer's bytes replace its start)
	dev.len = 1 << 40
	f.Add(pkt(dev.encode()), true)
	acc := mappedMsg{req: 1, code: uint32(rdmapb.Code_ACCESS_DENIED)}
	ns := mappedMsg{req: 2, code: uint32(rdmapb.Code_NOT_SUPPORTED)}
	f.Add(append(pkt(acc.encode()), pkt(ns.encode())...), false)
	f.Add(append(pkt(dev.encode()), pkt(slotMsg(msgGone, 1, 9))...), true)
	f.Fuzz(func(t *testing.T, packets []byte, realHandle bool) {
		b, reg := fuzzBackend(t)
		w := cudafake.NewWorld(cudafake.Config{})
		d, od := w.Process(), w.Process()
		defer d.Close()
		defer od.Close()
		reg.SetCUDA(d, nil)
		var handle cuda.IPCHandle
		if realHandle {
			octx, err := od.PrimaryContext(0)
			if err != nil {
				t.Fatal(err)
			}
			p, err := od.MemAlloc(octx, 4096)
			if err != nil {
				t.Fatal(err)
			}
			if handle, err = od.IPCGetMemHandle(octx, p); err != nil {
				t.Fatal(err)
			}
		}
		initiator, owner := socketPair(t)
		fd, tbl, err := newTable()
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		tbl.word(1, wID).Store(9)
		tbl.word(1, wState).Store(stAlive)
		r := newRoute(b, backendtest.OwnerB, initiator, tbl, nil)
		go func() {
			defer owner.Close()
			buf := make([]byte, maxPacket)
			_ = owner.SetReadDeadline(time.Now().Add(fuzzBound))
			if _, _, _, _, err := owner.ReadMsgUnix(buf, nil); err != nil {
				return
			}
			for p := packets; len(p) >= 1; {
				n := min(int(p[0]), len(p)-1)
				m := bytes.Clone(p[1 : 1+n])
				if realHandle && len(m) == len(dev.encode()) && m[0] == msgMappedDevice {
					copy(m[len(m)-64+len("forged"):], handle[len("forged"):]) // the fuzzer keeps the first bytes
				}
				_ = owner.SetWriteDeadline(time.Now().Add(fuzzBound))
				_ = writePacket(owner, m, -1)
				p = p[1+n:]
			}
			for { // answer nothing more; read until the route closes
				if _, _, _, _, err := owner.ReadMsgUnix(buf, nil); err != nil {
					return
				}
			}
		}()
		_, local := backendtest.Alloc(t, reg, 64, buffer.AccessReadWrite)
		rec := backendtest.NewRecorder(1)
		wr := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Deadline: time.Now().Add(time.Second), Done: rec,
			Remote: buffer.Buffer{OwnerID: backendtest.OwnerB, Region: 9, Length: 64, Access: buffer.AccessReadWrite, Location: buffer.CUDA(0)}}
		if err := r.Post(wr); err == nil {
			select {
			case <-rec.Results():
			case <-r.Done():
			case <-time.After(fuzzBound):
				t.Fatal("the operation neither completed nor failed")
			}
		}
		closed := make(chan struct{})
		go func() { r.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(fuzzBound):
			t.Fatal("route Close hangs")
		}
		if st := w.Stats(); st.LiveIPC != 0 {
			t.Fatalf("IPC mappings left open: %+v", st)
		}
	})
}
