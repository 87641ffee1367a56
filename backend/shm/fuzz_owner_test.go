//go:build linux

package shm_test

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// FuzzOwnerMessages is the owner's side of the socket under fuzz: an
// authenticated initiator sends any packets (map, unmap, event, send,
// send-more or none of them); the owner refuses or answers each, and
// afterwards still serves a route whose bytes are checked both ways.
//
// The input is packets, each a length byte and the bytes; a packet whose
// first byte is 0xFF becomes a valid map request for the owner's region
// (its second byte the access asked for), so the fuzzer reaches what
// follows a mapping (events and copies on a mapped slot).
func FuzzOwnerMessages(f *testing.F) {
	p := &pair{}
	p.a, p.regA = newBackend(f, backendtest.OwnerA, shm.Config{})
	backendtest.CloseAtCleanup(f, timeout, p.a, p.regA)
	p.b, p.regB = newBackend(f, backendtest.OwnerB, shm.Config{})
	backendtest.CloseAtCleanup(f, timeout, p.b, p.regB)
	p.route = backendtest.MustConnect(f, timeout, p.a, p.b, backendtest.OwnerB, backendtest.OwnerA)
	region, _ := backendtest.Alloc(f, p.regB, 8192, buffer.AccessReadWrite)

	pkt := func(b []byte) []byte { return append([]byte{byte(len(b))}, b...) }
	mapRegion := []byte{0xFF, byte(buffer.AccessReadWrite)}
	f.Add(pkt(mapRegion))
	f.Add(append(pkt(mapRegion), pkt(shm.EncodeEvent(2, 1, region.Region, 0, 64, 7))...))
	f.Add(append(pkt(mapRegion), pkt(shm.EncodeEvent(2, 1, region.Region, 8190, 64, 7))...))
	f.Add(pkt(shm.EncodeMap(1, 999, [16]byte{}, byte(buffer.AccessRead))))
	f.Add(pkt(shm.EncodeSend(3, 100, []byte("hello"))))
	// A forged origin (this peer is not the owner's agent), and malformed ones.
	f.Add(append(pkt(mapRegion), pkt(shm.EncodeEventOrigin(2, 1, region.Region, 0, 64, 7, 0xBAD))...))
	f.Add(append(pkt(mapRegion), pkt(shm.EncodeEventOrigin(2, 1, region.Region, 0, 64, 7, 0))...))
	f.Add(pkt(shm.EncodeSendOrigin(3, 100, 0xBAD, []byte("hello"))))
	f.Add(pkt(shm.EncodeSendOrigin(3, 100, 0, []byte("hello"))))
	f.Add(pkt(shm.EncodeSend(3, 1<<40, nil)))
	f.Add(pkt([]byte{shm.MsgSendMore, 3, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3}))
	f.Add(pkt([]byte{6, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})) // unmap slot 1
	f.Add(pkt([]byte{shm.MsgAck}))
	// A message cut short by its sender; an abort of none, of another.
	abort := func(req byte) []byte { return []byte{shm.MsgAbort, req, 0, 0, 0, 0, 0, 0, 0} }
	f.Add(append(pkt(shm.EncodeSend(3, 100, []byte("hello"))), pkt(abort(3))...))
	f.Add(pkt(abort(3)))
	f.Add(append(pkt(shm.EncodeSend(3, 100, []byte("hello"))), pkt(abort(4))...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, packets []byte) {
		r := authed(t, p.b)
		go func() { // the owner's answers, until it hangs up
			for {
				if _, _, err := r.read(); err != nil {
					return
				}
			}
		}()
		for q := packets; len(q) >= 1; {
			n := min(int(q[0]), len(q)-1)
			m := q[1 : 1+n]
			q = q[1+n:]
			if len(m) >= 2 && m[0] == 0xFF {
				m = shm.EncodeMap(1, region.Region, region.Key, m[1])
			}
			if _, _, err := r.c.WriteMsgUnix(m, nil, nil); err != nil {
				break // the owner hung up on an earlier packet
			}
		}
		r.c.Close()
		backendtest.CheckRoute(t, timeout, p.route, p.regA, p.regB)
	})
}
