package tcp

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// FuzzServeConn feeds an authenticated server connection arbitrary bytes:
// it must never panic or hang, and without the region's key nothing may
// change its memory (a send may land in the receive buffer posted at the
// inbox, another region). The server is not an agent: frames with a via
// or an origin are refused.
func FuzzServeConn(f *testing.F) { fuzzServe(f, false) }

// FuzzServeConnVia is FuzzServeConn against a host agent (a resolver with
// one attached process at slot 1): neither the agent's memory nor the
// process's may change without their keys.
func FuzzServeConnVia(f *testing.F) { fuzzServe(f, true) }

func fuzzServe(f *testing.F, agent bool) {
	w := reqHeader{op: opWrite, length: 8, wrid: 1, region: 1, offset: 0}
	hb := make([]byte, reqHeaderSize)
	w.encode(hb)
	f.Add(append(bytes.Clone(hb), make([]byte, 8)...))
	r := reqHeader{op: opRead, length: 16, wrid: 2, region: 1, offset: 8}
	r.encode(hb)
	f.Add(bytes.Clone(hb))
	p := reqHeader{op: opPing, wrid: 3}
	p.encode(hb)
	f.Add(bytes.Clone(hb))
	f.Add(bytes.Repeat([]byte{0xff}, 100))
	f.Add([]byte{})
	for _, hs := range [][]reqHeader{verbHeaders(), viaHeaders()} {
		for _, v := range hs {
			v.region, v.key = 1, buffer.Key{}
			if v.op == opSend {
				v.region = 0
			}
			if v.length > 64 {
				v.length = 64
			}
			if v.op == opWriteImm && v.total > 64 {
				v.total = uint64(v.length)
			}
			f.Add(verbFrame(v, make([]byte, v.length), trailerCommit))
			f.Add(verbFrame(v, make([]byte, v.length), trailerAbort))
		}
	}

	reg := memreg.NewRegistry(backendtest.OwnerB, buffer.Limits{})
	h, err := reg.Allocate(4096, accessAll)
	if err != nil {
		f.Fatal(err)
	}
	mem, _ := reg.Bytes(h)
	recv, err := reg.Allocate(4096, buffer.AccessReadWrite) // where sends land
	if err != nil {
		f.Fatal(err)
	}
	b, err := New(Config{MaxFrameLen: 1 << 16, ChunkSize: 1 << 16}, reg, nil)
	if err != nil {
		f.Fatal(err)
	}
	in := backendtest.NewInbox(reg, 4, 4)
	b.SetInbox(in)
	inboxes := []*backendtest.Inbox{in}
	var procMem []byte
	var procRecv buffer.Buffer
	if agent {
		fake := newFakeAgent(reg, 1)
		if _, procMem, err = fake.region(4096, accessAll); err != nil { // region 1 of the process
			f.Fatal(err)
		}
		if procRecv, err = fake.proc.Allocate(4096, buffer.AccessReadWrite); err != nil {
			f.Fatal(err)
		}
		inboxes = append(inboxes, fake.inbox)
		wiring.SetResolver(b, fake)
		// The process's registry and the proxies are closed with the
		// target (their memfds and mappings are not left to the GC).
		f.Cleanup(func() {
			for _, in := range inboxes {
				in.Close()
			}
			_ = b.Close()
			_ = reg.Close(context.Background())
			_ = fake.proc.Close(context.Background())
		})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i, in := range inboxes {
			drainInbox(in)
			if in.Posted() == 0 {
				rb := recv
				if i > 0 {
					rb = procRecv
				}
				if err := in.Post(rb); err != nil {
					t.Fatal(err)
				}
			}
		}
		server, client := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s := serverConn{b: b, c: server}
			_ = s.serve()
			server.Close()
		}()
		go io.Copy(io.Discard, client)
		_, _ = client.Write(data)
		client.Close()
		<-done
		for i, c := range mem {
			if c != 0 {
				t.Fatalf("owner memory changed at %d", i)
			}
		}
		for i, c := range procMem {
			if c != 0 {
				t.Fatalf("attached process's memory changed at %d", i)
			}
		}
	})
}

// drainInbox empties in's queues.
func drainInbox(in *backendtest.Inbox) {
	for {
		select {
		case <-in.Events():
		case <-in.Messages():
		default:
			return
		}
	}
}

// FuzzChallenge: the client decodes the server's first bytes; it must
// never panic and an accepted challenge re-encodes to the same bytes.
func FuzzChallenge(f *testing.F) {
	var b [challengeSize]byte
	encodeChallenge(b[:], [16]byte{1, 2, 3})
	f.Add(b[:])
	f.Add(b[:10])
	f.Add(bytes.Repeat([]byte{0xff}, challengeSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		nonce, err := decodeChallenge(data)
		if err != nil {
			return
		}
		var enc [challengeSize]byte
		encodeChallenge(enc[:], nonce)
		if !bytes.Equal(enc[:], data[:challengeSize]) {
			t.Fatalf("re-encoding differs: %x vs %x", enc, data[:challengeSize])
		}
	})
}
