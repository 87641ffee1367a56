package agentwire

import (
	"bytes"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// FuzzDecode feeds hostile packets to every decoder. Whatever a decoder
// accepts must encode back to the very same bytes (the encoding is
// canonical: nothing is ignored, nothing is lost), and nothing panics.
func FuzzDecode(f *testing.F) {
	var b Batch
	b.Start(TypePost)
	ps := posts()
	for i := range ps {
		_ = b.AddPost(&ps[i])
		f.Add(append([]byte(nil), b.Packet()...))
	}
	b.Start(TypeDone)
	_ = b.AddDone(Done{WRID: 1, Code: 5})
	f.Add(append([]byte(nil), b.Packet()...))
	b.Start(TypeCancel)
	_ = b.AddCancel(3)
	f.Add(append([]byte(nil), b.Packet()...))
	h := Hello{Nonce: [NonceSize]byte{1}, AgentID: 1}
	pkt, _ := h.Encode()
	f.Add(pkt)
	a := Auth{PID: 1, ManagerID: 2, Addr: "x:1", MAC: make([]byte, MACSize)}
	pkt, _ = a.Encode()
	f.Add(pkt)
	pkt, _ = EncodeInfo(TypeShmPrepare, []byte("info"))
	f.Add(pkt)
	w := Welcome{Slot: 1, Generation: 1, AgentAddr: "y:2", AgentID: 3, HostID: [HostIDSize]byte{4}}
	pkt, _ = w.Encode()
	f.Add(pkt)
	g := Gone{Code: 6, Reason: "bye"}
	pkt, _ = g.Encode()
	f.Add(pkt)
	pkt, _ = (&Ask{ID: 1, Far: "z:3"}).Encode()
	f.Add(pkt)
	pkt, _ = (&Answer{ID: 1, Backend: AnswerIBVerbs}).Encode()
	f.Add(pkt)

	f.Fuzz(func(t *testing.T, pkt []byte) {
		typ, err := Type(pkt)
		if err != nil {
			return
		}
		var again []byte
		switch typ {
		case TypeHello:
			h, err := DecodeHello(pkt)
			if err != nil {
				return
			}
			if again, err = h.Encode(); err != nil {
				t.Fatalf("decoded hello does not encode: %v", err)
			}
		case TypeAuth:
			a, err := DecodeAuth(pkt)
			if err != nil {
				return
			}
			if again, err = a.Encode(); err != nil {
				t.Fatalf("decoded auth does not encode: %v", err)
			}
		case TypeShmPrepare, TypeShmAccept:
			info, err := DecodeInfo(typ, pkt)
			if err != nil {
				return
			}
			if again, err = EncodeInfo(typ, info); err != nil {
				t.Fatalf("decoded info does not encode: %v", err)
			}
		case TypeAsk:
			q, err := DecodeAsk(pkt)
			if err != nil {
				return
			}
			if again, err = q.Encode(); err != nil {
				t.Fatalf("decoded ask does not encode: %v", err)
			}
		case TypeAnswer:
			a, err := DecodeAnswer(pkt)
			if err != nil {
				return
			}
			if again, err = a.Encode(); err != nil {
				t.Fatalf("decoded answer does not encode: %v", err)
			}
		case TypeWelcome:
			w, err := DecodeWelcome(pkt)
			if err != nil {
				return
			}
			if again, err = w.Encode(); err != nil {
				t.Fatalf("decoded welcome does not encode: %v", err)
			}
		case TypeGone:
			g, err := DecodeGone(pkt)
			if err != nil {
				return
			}
			if again, err = g.Encode(); err != nil {
				t.Fatalf("decoded gone does not encode: %v", err)
			}
		case TypePost:
			ps, err := DecodePosts(pkt, nil)
			if err != nil {
				return
			}
			var b Batch
			b.Start(TypePost)
			for i := range ps {
				if err := b.AddPost(&ps[i]); err != nil {
					t.Fatalf("decoded post %d does not encode: %v", i, err)
				}
				checkPost(t, &ps[i])
			}
			again = b.Packet()
		case TypeDone:
			ds, err := DecodeDones(pkt, nil)
			if err != nil {
				return
			}
			var b Batch
			b.Start(TypeDone)
			for _, d := range ds {
				if err := b.AddDone(d); err != nil {
					t.Fatalf("decoded done does not encode: %v", err)
				}
			}
			again = b.Packet()
		case TypeCancel:
			ids, err := DecodeCancels(pkt, nil)
			if err != nil {
				return
			}
			var b Batch
			b.Start(TypeCancel)
			for _, id := range ids {
				if err := b.AddCancel(id); err != nil {
					t.Fatal(err)
				}
			}
			again = b.Packet()
		}
		if !bytes.Equal(again, pkt) {
			t.Fatalf("type %d: decoded then encoded differs:\n%x\n%x", typ, pkt, again)
		}
	})
}

// checkPost asserts what the agent relies on in a post that decoded.
func checkPost(t *testing.T, p *Post) {
	t.Helper()
	if p.Via == 0 || p.FarAgent == "" || p.FarAgentID == 0 || p.Deadline < 0 {
		t.Fatalf("post %+v", p)
	}
	if p.Op.Atomic() {
		if p.Remote.Length != 8 || p.Local != (Local{}) {
			t.Fatalf("atomic %+v", p)
		}
		return
	}
	if p.Local.Length == 0 || p.Local.Offset+p.Local.Length < p.Local.Offset {
		t.Fatalf("local %+v", p.Local)
	}
	if !p.Remote.IsZero() {
		if _, err := buffer.FromProto(p.Remote.Proto()); err != nil || p.Remote.Length != p.Local.Length {
			t.Fatalf("remote %+v: %v", p.Remote, err)
		}
	}
}
