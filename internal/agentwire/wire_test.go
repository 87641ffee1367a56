package agentwire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func remote(n uint64) buffer.Buffer {
	return buffer.Buffer{OwnerID: 7, OwnerAddr: "10.0.0.2:4000", Region: 9, Offset: 64, Length: n,
		Key: buffer.Key{1, 2, 3}, Access: buffer.AccessReadWrite | buffer.AccessAtomic | buffer.AccessNotify,
		RDMA: buffer.RDMAKey{Addr: 0x1000, RKey: 5}, Lease: 3 * time.Second}
}

// posts returns one valid post of each op.
func posts() []Post {
	local := Local{Region: 3, Key: buffer.Key{9}, Offset: 8, Length: 100}
	base := Post{Via: 2, FarAgent: "10.0.0.2:5000", FarAgentID: 0xfa, Local: local, Remote: remote(100), Deadline: time.Second}
	var out []Post
	for i, op := range []backend.Op{backend.OpWrite, backend.OpRead, backend.OpWriteImm, backend.OpSend, backend.OpSend, backend.OpCompareSwap, backend.OpFetchAdd} {
		p := base
		p.WRID, p.Op = uint64(i+1), op
		switch {
		case op == backend.OpWriteImm:
			p.Imm = 77
		case op == backend.OpSend:
			p.Remote = buffer.Buffer{}
			if i == 4 {
				p.HasImm, p.Imm = true, 5
			}
		case op.Atomic():
			p.Local, p.Remote = Local{}, remote(8)
			p.Swap = 3
			if op == backend.OpCompareSwap {
				p.Compare = 4
			}
		}
		out = append(out, p)
	}
	return out
}

func TestPostRoundTrip(t *testing.T) {
	var b Batch
	b.Start(TypePost)
	want := posts()
	for i := range want {
		if err := b.AddPost(&want[i]); err != nil {
			t.Fatalf("AddPost %d: %v", i, err)
		}
	}
	got, err := DecodePosts(b.Packet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Decoding reuses dst and clears what it reuses.
	dst := make([]Post, 1, 8)
	dst[0].HasImm = true
	if got, err = DecodePosts(b.Packet(), dst); err != nil || !reflect.DeepEqual(got, want) || &got[0] != &dst[0] {
		t.Fatalf("reusing dst: %v", err)
	}
}

// Every post the encoder refuses is one the decoder refuses too.
func TestPostRefused(t *testing.T) {
	mut := map[string]func(p *Post){
		"op 0":            func(p *Post) { p.Op = 0 },
		"op 7":            func(p *Post) { p.Op = 7 },
		"no via":          func(p *Post) { p.Via = 0 },
		"no far agent":    func(p *Post) { p.FarAgent = "" },
		"no far agent id": func(p *Post) { p.FarAgentID = 0 },
		"control char":    func(p *Post) { p.FarAgent = "a\nb" },
		"long addr":       func(p *Post) { p.FarAgent = strings.Repeat("a", MaxAddr+1) },
		"bad utf8":        func(p *Post) { p.Remote.OwnerAddr = "\xff" },
		"neg deadline":    func(p *Post) { p.Deadline = -1 },
		"imm on write":    func(p *Post) { p.Imm = 1 },
		"has-imm":         func(p *Post) { p.HasImm = true },
		"swap on write":   func(p *Post) { p.Swap = 1 },
		"compare":         func(p *Post) { p.Compare = 1 },
		"no local":        func(p *Post) { p.Local.Region = 0 },
		"zero length":     func(p *Post) { p.Local.Length, p.Remote.Length = 0, 0 },
		"length mismatch": func(p *Post) { p.Local.Length = 99 },
		"local overflow":  func(p *Post) { p.Local.Offset = ^uint64(0) },
		"no owner":        func(p *Post) { p.Remote.OwnerID = 0 },
		"no region":       func(p *Post) { p.Remote.Region = 0 },
		"access":          func(p *Post) { p.Remote.Access = 1 << 9 },
		"remote overflow": func(p *Post) { p.Remote.Offset = ^uint64(0) },
		"lease":           func(p *Post) { p.Remote.Lease = 400 * 24 * time.Hour },
		"lease negative":  func(p *Post) { p.Remote.Lease = -time.Millisecond },
		"rkey alone":      func(p *Post) { p.Remote.RDMA.Addr = 0 },
	}
	for name, f := range mut {
		p := posts()[0]
		f(&p)
		var b Batch
		b.Start(TypePost)
		if err := b.AddPost(&p); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: AddPost: %v", name, err)
		}
		if b.Count() != 0 || b.Packet() != nil {
			t.Errorf("%s: batch changed", name)
		}
		// The same record forced onto the wire.
		raw := append([]byte{TypePost, 1, 0}, appendPost(nil, &p)...)
		if got, err := DecodePosts(raw, nil); !errors.Is(err, rdmamgr.ErrProtocol) || len(got) != 0 {
			t.Errorf("%s: decoded: %v, %d records", name, err, len(got))
		}
	}
	for name, f := range map[string]func(p *Post){
		"send with remote":   func(p *Post) { p.Op = backend.OpSend },
		"atomic local":       func(p *Post) { p.Op, p.Remote = backend.OpFetchAdd, remote(8) },
		"atomic of 16 bytes": func(p *Post) { p.Op, p.Local, p.Remote = backend.OpFetchAdd, Local{}, remote(16) },
		"compare on add":     func(p *Post) { p.Op, p.Local, p.Remote, p.Compare = backend.OpFetchAdd, Local{}, remote(8), 1 },
	} {
		p := posts()[0]
		f(&p)
		if err := p.check(); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// One bad record fails the whole packet; so do a wrong count, trailing
// bytes, truncation, flags and a lease or deadline beyond bounds.
func TestBatchAllOrNothing(t *testing.T) {
	var b Batch
	b.Start(TypePost)
	ps := posts()
	for i := range ps {
		if err := b.AddPost(&ps[i]); err != nil {
			t.Fatal(err)
		}
	}
	good := append([]byte(nil), b.Packet()...)
	cases := map[string][]byte{
		"count high":  append(append([]byte{}, good[0], good[1]+1, good[2]), good[3:]...),
		"count low":   append(append([]byte{}, good[0], good[1]-1, good[2]), good[3:]...),
		"count zero":  {TypePost, 0, 0},
		"trailing":    append(append([]byte{}, good...), 0),
		"truncated":   good[:len(good)-1],
		"wrong type":  append([]byte{TypeDone}, good[1:]...),
		"too large":   append(append([]byte{}, good...), make([]byte, MaxPacket)...),
		"head only":   good[:2],
		"flags":       setByte(good, batchHead+9, 2),
		"last bad op": setByte(good, len(good)-len(appendPost(nil, &ps[len(ps)-1]))+8, 9),
	}
	for name, pkt := range cases {
		got, err := DecodePosts(pkt, make([]Post, 0, 8))
		if !errors.Is(err, rdmamgr.ErrProtocol) || len(got) != 0 {
			t.Errorf("%s: %v, %d records", name, err, len(got))
		}
	}
}

func setByte(b []byte, i int, v byte) []byte {
	c := append([]byte(nil), b...)
	c[i] = v
	return c
}

func TestDoneCancel(t *testing.T) {
	var b Batch
	b.Start(TypeDone)
	want := []Done{{WRID: 1}, {WRID: 2, Code: uint32(rdmapb.Code_REVOKED)}, {WRID: 3, Result: 42}}
	for _, d := range want {
		if err := b.AddDone(d); err != nil {
			t.Fatal(err)
		}
	}
	got, err := DecodeDones(b.Packet(), nil)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("dones %+v, %v", got, err)
	}
	for name, d := range map[string]Done{"unknown code": {Code: 999}, "result of failure": {Code: 6, Result: 1}, "negative code": {Code: 1 << 31}} {
		if err := b.AddDone(d); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: %v", name, err)
		}
		raw := []byte{TypeDone, 1, 0}
		raw = append(raw, make([]byte, 8)...)
		raw = append(raw, byte(d.Code), byte(d.Code>>8), byte(d.Code>>16), byte(d.Code>>24), byte(d.Result), 0, 0, 0, 0, 0, 0, 0)
		if got, err := DecodeDones(raw, nil); !errors.Is(err, rdmamgr.ErrProtocol) || len(got) != 0 {
			t.Errorf("%s decoded: %v", name, err)
		}
	}
	if _, err := DecodeDones(append(b.Packet(), 1), nil); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Errorf("trailing byte: %v", err)
	}

	b.Start(TypeCancel)
	for i := uint64(1); i <= 3; i++ {
		if err := b.AddCancel(i * 10); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := DecodeCancels(b.Packet(), nil)
	if err != nil || !reflect.DeepEqual(ids, []uint64{10, 20, 30}) {
		t.Fatalf("cancels %v, %v", ids, err)
	}
	if _, err := DecodeCancels(b.Packet()[:b.Packet()[0]+8], nil); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Errorf("short cancel batch: %v", err)
	}
}

// A batch fills up to MaxPacket (or the count's bound), then says ErrFull
// and stays decodable.
func TestBatchFull(t *testing.T) {
	var b Batch
	b.Start(TypeCancel)
	n := 0
	for ; b.AddCancel(uint64(n)) == nil; n++ {
	}
	if err := b.AddCancel(1); !errors.Is(err, ErrFull) {
		t.Fatalf("AddCancel past full: %v", err)
	}
	if n != (MaxPacket-batchHead)/8 || len(b.Packet()) > MaxPacket {
		t.Fatalf("%d cancels in %d bytes", n, len(b.Packet()))
	}
	if ids, err := DecodeCancels(b.Packet(), nil); err != nil || len(ids) != n {
		t.Fatalf("full batch: %d, %v", len(ids), err)
	}
	b.Start(TypePost)
	p := posts()[0]
	p.FarAgent, p.Remote.OwnerAddr = strings.Repeat("f", MaxAddr), strings.Repeat("o", MaxAddr)
	for n = 0; b.AddPost(&p) == nil; n++ {
	}
	if len(b.Packet()) > MaxPacket || n < 50 {
		t.Fatalf("%d posts in %d bytes", n, len(b.Packet()))
	}
	if got, err := DecodePosts(b.Packet(), nil); err != nil || len(got) != n {
		t.Fatalf("full post batch: %d, %v", len(got), err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a done in a post batch did not panic")
			}
		}()
		_ = b.AddDone(Done{})
	}()
}

func TestAttachMessages(t *testing.T) {
	h := Hello{Nonce: [NonceSize]byte{1, 2}, AgentID: 8}
	hp, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeHello(hp); err != nil || got != h {
		t.Fatalf("hello: %+v, %v", got, err)
	}
	old := bytes.Clone(hp)
	old[1] = Version + 1
	if _, err := DecodeHello(old); !errors.Is(err, rdmamgr.ErrVersion) {
		t.Fatalf("hello of another version: %v", err)
	}
	if _, err := DecodeHello(hp[:5]); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("short hello: %v", err)
	}
	if _, err := (&Hello{}).Encode(); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("hello without agent id: %v", err)
	}
	if _, err := DecodeHello(append(hp[:len(hp)-8:len(hp)-8], make([]byte, 8)...)); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("decoded hello without agent id: %v", err)
	}

	secret, err := backend.NewSecret([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	a := Auth{Version: Version, PID: 42, ManagerID: 99, Addr: "127.0.0.1:1"}
	a.MAC = AuthMAC(secret, h.Nonce, a.PID, a.ManagerID, a.Addr)
	pkt, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAuth(pkt)
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("auth: %+v, %v", got, err)
	}
	if err := got.Verify(secret, h.Nonce); err != nil {
		t.Fatalf("verify: %v", err)
	}
	for name, f := range map[string]func(a *Auth){
		"pid":   func(a *Auth) { a.PID++ },
		"id":    func(a *Auth) { a.ManagerID++ },
		"addr":  func(a *Auth) { a.Addr += "0" },
		"mac":   func(a *Auth) { a.MAC = bytes.Clone(a.MAC); a.MAC[0] ^= 1 },
		"empty": func(a *Auth) { a.MAC = nil },
	} {
		b := got
		f(&b)
		if err := b.Verify(secret, h.Nonce); !errors.Is(err, rdmamgr.ErrUnauthenticated) {
			t.Errorf("forged %s: %v", name, err)
		}
	}
	if err := got.Verify(secret, [NonceSize]byte{9}); !errors.Is(err, rdmamgr.ErrUnauthenticated) {
		t.Errorf("other nonce: %v", err)
	}
	if err := (&Auth{}).Verify(backend.Secret{}, h.Nonce); err != nil {
		t.Errorf("no secret: %v", err)
	}
	for name, b := range map[string]Auth{"no pid": {ManagerID: 1, Addr: "a"}, "no id": {PID: 1, Addr: "a"},
		"no addr": {PID: 1, ManagerID: 1}, "short mac": {PID: 1, ManagerID: 1, Addr: "a", MAC: []byte{1}}} {
		if _, err := b.Encode(); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("auth %s: %v", name, err)
		}
	}

	info := []byte("shm route info")
	for _, typ := range []byte{TypeShmPrepare, TypeShmAccept} {
		p, err := EncodeInfo(typ, info)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeInfo(typ, p); err != nil || !bytes.Equal(got, info) {
			t.Fatalf("info: %q, %v", got, err)
		}
		if _, err := DecodeInfo(TypeShmPrepare+TypeShmAccept-typ, p); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Fatalf("info of the other type: %v", err)
		}
		if _, err := DecodeInfo(typ, p[:len(p)-1]); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Fatalf("short info: %v", err)
		}
	}
	if _, err := EncodeInfo(TypeShmPrepare, nil); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("empty info: %v", err)
	}
	if _, err := EncodeInfo(TypeShmPrepare, make([]byte, MaxInfo+1)); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("large info: %v", err)
	}

	w := Welcome{Slot: 3, Generation: 1, AgentAddr: "127.0.0.1:2", AgentID: 5, HostID: [HostIDSize]byte{1}}
	pkt, err = w.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeWelcome(pkt); err != nil || got != w {
		t.Fatalf("welcome: %+v, %v", got, err)
	}
	for name, f := range map[string]func(w *Welcome){
		"slot": func(w *Welcome) { w.Slot = 0 }, "generation": func(w *Welcome) { w.Generation = 0 },
		"addr": func(w *Welcome) { w.AgentAddr = "" }, "id": func(w *Welcome) { w.AgentID = 0 },
		"host": func(w *Welcome) { w.HostID = [HostIDSize]byte{} },
	} {
		b := w
		f(&b)
		if _, err := b.Encode(); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("welcome without %s: %v", name, err)
		}
	}

	g := Gone{Code: uint32(rdmapb.Code_CLOSED), Reason: "agent stopping"}
	pkt, err = g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	gg, err := DecodeGone(pkt)
	if err != nil || gg != g {
		t.Fatalf("gone: %+v, %v", gg, err)
	}
	if err := gg.Err(); !errors.Is(err, rdmamgr.ErrClosed) || !strings.Contains(err.Error(), "agent stopping") {
		t.Fatalf("gone's error: %v", err)
	}
	for _, b := range []Gone{{Code: 0}, {Code: 500}, {Code: 6, Reason: "\x00"}, {Code: 6, Reason: strings.Repeat("r", MaxReason+1)}} {
		if _, err := b.Encode(); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("gone %+v: %v", b, err)
		}
	}

	for _, pkt := range [][]byte{nil, {0}, {TypeAnswer + 1}} {
		if _, err := Type(pkt); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("Type(%v): %v", pkt, err)
		}
	}
}

func TestDoneErr(t *testing.T) {
	d := DoneOf(4, fmt.Errorf("x: %w", rdmamgr.ErrRevoked), 9)
	if d.WRID != 4 || d.Result != 0 || !errors.Is(d.Err(backend.OpRead), rdmamgr.ErrRevoked) {
		t.Fatalf("%+v: %v", d, d.Err(backend.OpRead))
	}
	if d := DoneOf(5, nil, 9); d.Code != 0 || d.Result != 9 || d.Err(backend.OpFetchAdd) != nil {
		t.Fatalf("%+v", d)
	}
}
