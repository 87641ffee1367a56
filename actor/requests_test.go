package actor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func TestUnknownMessage(t *testing.T) {
	sys, a, _ := newPair(t)
	ctx := testCtx(t)
	for _, msg := range []any{&rdmapb.Pong{}, &rdmapb.RouteHandshakeResponse{}, &rdmapb.Error{}, "hello", 42} {
		res := ask(t, sys, a.PID(), msg)
		er, ok := res.(*rdmapb.ErrorReply)
		if !ok || er.Error.GetCode() != rdmapb.Code_UNKNOWN_MESSAGE {
			t.Fatalf("%T: reply %T %v", msg, res, res)
		}
		if err := toError(er.Error); !errors.Is(err, rdmamgr.ErrUnknownMessage) {
			t.Fatalf("%T: %v", msg, err)
		}
	}
	// Without a sender: nothing to answer, nothing breaks.
	sys.Root.Send(a.PID(), &rdmapb.Pong{})
	sys.Root.Send(a.PID(), "hello")
	if id, err := a.Client().Ping(ctx); err != nil || id != a.ID() {
		t.Fatalf("ping after unknown messages: %x %v", id, err)
	}
	// The typed client reports a reply of the wrong type.
	if _, err := request[*rdmapb.Pong](ctx, a.Client(), &rdmapb.Pong{}); !errors.Is(err, rdmamgr.ErrUnknownMessage) {
		t.Fatalf("client: %v", err)
	}
	if _, err := request[*rdmapb.Pong](ctx, a.Client(), &rdmapb.StatusRequest{}); !errors.Is(err, rdmamgr.ErrBadResponse) {
		t.Fatalf("client, wrong reply type: %v", err)
	}
}

// malformedEnv is what TestMalformedRequests' parts share: a pair of
// managers, a's own client and a client of a without the manager (rc), a
// buffer at each.
type malformedEnv struct {
	sys          *protoactor.ActorSystem
	a, b         *Manager
	ac, rc       *Client
	mine, theirs buffer.Buffer
}

func TestMalformedRequests(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	e := &malformedEnv{sys: sys, a: a, b: b, ac: a.Client(), rc: NewClient(sys, a.PID())}
	e.mine = requestBuf(t, ctx, e.ac, 4096, buffer.AccessReadWrite)
	e.theirs = requestBuf(t, ctx, b.Client(), 4096, buffer.AccessReadWrite)
	t.Run("RequestBuffer", e.requestBuffer)
	t.Run("ReleaseBuffer", e.releaseBuffer)
	t.Run("RouteHandshake", e.routeHandshake)
	t.Run("RequestQueuePair", e.requestQueuePair)
	if id, err := e.ac.Ping(ctx); err != nil || id != a.ID() {
		t.Fatalf("ping after malformed requests: %v", err)
	}
}

func (e *malformedEnv) requestBuffer(t *testing.T) {
	sys, a, rc := e.sys, e.a, e.rc
	ctx := testCtx(t)
	for _, tc := range []struct {
		size   uint64
		access buffer.Access
	}{{0, buffer.AccessReadWrite}, {1, 16}, {1, 0xffffffff}, {0, 8}} {
		if _, err := rc.RequestBuffer(ctx, tc.size, tc.access); !errors.Is(err, rdmamgr.ErrInvalid) {
			t.Fatalf("size %d access %#x: %v", tc.size, uint32(tc.access), err)
		}
	}
	small := NewClient(sys, a.PID())
	small.maxMsg = 1
	if _, err := small.RequestBuffer(ctx, 1<<40, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrMessageTooLarge) {
		t.Fatalf("oversize message: %v", err)
	}
}

func (e *malformedEnv) releaseBuffer(t *testing.T) {
	sys, a, b, rc, mine, theirs := e.sys, e.a, e.b, e.rc, e.mine, e.theirs
	ctx := testCtx(t)
	res := ask(t, sys, a.PID(), &rdmapb.ReleaseBuffer{})
	if r, ok := res.(*rdmapb.ReleaseBufferResponse); !ok || r.Error.GetCode() != rdmapb.Code_INVALID_ARGUMENT {
		t.Fatalf("nil buffer: %v", res)
	}
	shortKey := mine.Proto()
	shortKey.Key = shortKey.Key[:5]
	res = ask(t, sys, a.PID(), &rdmapb.ReleaseBuffer{Buffer: shortKey})
	if r, ok := res.(*rdmapb.ReleaseBufferResponse); !ok || !errors.Is(toError(r.Error), rdmamgr.ErrInvalid) {
		t.Fatalf("short key: %v", res)
	}
	if err := rc.ReleaseBuffer(ctx, buffer.Buffer{}); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("zero buffer: %v", err)
	}
	wrongKey := mine
	wrongKey.Key[15] ^= 0x80
	if err := rc.ReleaseBuffer(ctx, wrongKey); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("wrong key: %v", err)
	}
	if err := rc.ReleaseBuffer(ctx, theirs); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("foreign owner: %v", err)
	}
	noSuch := mine
	noSuch.Region += 1000
	if err := rc.ReleaseBuffer(ctx, noSuch); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("unknown region: %v", err)
	}
	// Nothing was released by the bad requests.
	if _, err := a.Bytes(mine); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Bytes(theirs); err != nil {
		t.Fatal(err)
	}
}

func (e *malformedEnv) routeHandshake(t *testing.T) {
	sys, a, b := e.sys, e.a, e.b
	ctx := testCtx(t)
	_, info, err := a.preferred().PrepareRoute(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *rdmapb.RouteHandshake {
		return &rdmapb.RouteHandshake{Version: ProtocolVersion, InitiatorId: a.ID(), InitiatorAddr: sys.Address(), Backend: "tcp", Endpoint: info}
	}
	for _, tc := range []struct {
		name string
		mod  func(h *rdmapb.RouteHandshake)
		want error
	}{
		{"wrong version", func(h *rdmapb.RouteHandshake) { h.Version = ProtocolVersion + 1 }, rdmamgr.ErrVersion},
		{"version 0", func(h *rdmapb.RouteHandshake) { h.Version = 0 }, rdmamgr.ErrVersion},
		{"garbage endpoint", func(h *rdmapb.RouteHandshake) { h.Endpoint = []byte("garbage endpoint bytes") }, rdmamgr.ErrProtocol},
		{"empty endpoint", func(h *rdmapb.RouteHandshake) { h.Endpoint = nil }, rdmamgr.ErrProtocol},
		{"endpoint of another version", func(h *rdmapb.RouteHandshake) { h.Endpoint = []byte{9, 0, 1, 0} }, rdmamgr.ErrVersion},
		{"zero connections", func(h *rdmapb.RouteHandshake) { h.Endpoint = []byte{1, 0, 0, 0} }, rdmamgr.ErrProtocol},
		{"no initiator", func(h *rdmapb.RouteHandshake) { h.InitiatorId = 0 }, rdmamgr.ErrInvalid},
	} {
		h := good()
		tc.mod(h)
		res, ok := ask(t, sys, b.PID(), h).(*rdmapb.RouteHandshakeResponse)
		if !ok {
			t.Fatalf("%s: reply %T", tc.name, res)
		}
		if err := toError(res.Error); !errors.Is(err, tc.want) || len(res.Endpoint) != 0 {
			t.Fatalf("%s: %v (endpoint %d bytes)", tc.name, err, len(res.Endpoint))
		}
	}
	h := good()
	h.Backend = "ibverbs"
	if res := ask(t, sys, b.PID(), h).(*rdmapb.RouteHandshakeResponse); res.Error.GetCode() == rdmapb.Code_OK || len(res.Endpoint) != 0 {
		t.Fatalf("other backend: %v", res)
	}
	// The well-formed handshake is accepted.
	if res := ask(t, sys, b.PID(), good()).(*rdmapb.RouteHandshakeResponse); res.Error != nil || len(res.Endpoint) == 0 || res.ResponderId != b.ID() {
		t.Fatalf("good handshake: %v", res)
	}
}

func (e *malformedEnv) requestQueuePair(t *testing.T) {
	sys, a, b, ac, rc := e.sys, e.a, e.b, e.ac, e.rc
	ctx := testCtx(t)
	if _, err := ac.RequestQueuePair(ctx, nil); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("nil peer: %v", err)
	}
	for _, ref := range []*rdmapb.ManagerRef{nil, {}, {Address: sys.Address()}, {Id: "b"}} {
		res := ask(t, sys, a.PID(), &rdmapb.RequestQueuePair{Peer: ref})
		if r, ok := res.(*rdmapb.RequestQueuePairResponse); !ok || !errors.Is(toError(r.Error), rdmamgr.ErrInvalid) || r.QpId != 0 {
			t.Fatalf("peer %v: %v", ref, res)
		}
	}
	// Only a client in the manager's process gets queue pairs.
	if _, err := rc.RequestQueuePair(ctx, b.PID()); !errors.Is(err, rdmamgr.ErrNotLocal) {
		t.Fatalf("client without the manager: %v", err)
	}
	res := ask(t, sys, a.PID(), &rdmapb.ReleaseQueuePair{QpId: 12345})
	if r, ok := res.(*rdmapb.ReleaseQueuePairResponse); !ok || !errors.Is(toError(r.Error), rdmamgr.ErrReleased) {
		t.Fatalf("release unknown queue pair: %v", res)
	}
}

// A registry limit answers RESOURCE_EXHAUSTED. The client maps that code to
// an error wrapping both rdmamgr.ErrLimit and rdmamgr.ErrLimit: the wire
// code does not say which side's limit was hit, so either errors.Is works.
func TestRegistryLimit(t *testing.T) {
	sys := newSystem(t)
	a := startManager(t, sys, Config{Name: "a", Limits: buffer.Limits{MaxBytes: 1 << 20, MaxRegions: 3}})
	ctx := testCtx(t)
	c := NewClient(sys, a.PID())
	big := requestBuf(t, ctx, c, 1<<20, buffer.AccessReadWrite)
	for _, size := range []uint64{1, 1 << 20, 1 << 50} {
		_, err := c.RequestBuffer(ctx, size, buffer.AccessRead)
		if !errors.Is(err, rdmamgr.ErrLimit) {
			t.Fatalf("%d bytes over the limit: %v", size, err)
		}
	}
	if err := c.ReleaseBuffer(ctx, big); err != nil {
		t.Fatal(err)
	}
	var bufs []buffer.Buffer
	for range 3 {
		bufs = append(bufs, requestBuf(t, ctx, c, 1000, buffer.AccessRead))
	}
	if _, err := c.RequestBuffer(ctx, 1, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("region over the limit: %v", err)
	}
	// Release makes room again.
	if err := c.ReleaseBuffer(ctx, bufs[1]); err != nil {
		t.Fatal(err)
	}
	requestBuf(t, ctx, c, 1000, buffer.AccessRead)
	if st, _ := a.Client().Status(ctx); st.RegisteredBytes != 3000 || len(st.Buffers) != 3 {
		t.Fatalf("status %v", st)
	}
}

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code rdmapb.Code
		want []error
	}{
		{fmt.Errorf("x: %w", rdmamgr.ErrLimit), rdmapb.Code_RESOURCE_EXHAUSTED, []error{rdmamgr.ErrLimit, rdmamgr.ErrLimit}},
		{fmt.Errorf("x: %w", rdmamgr.ErrLimit), rdmapb.Code_RESOURCE_EXHAUSTED, []error{rdmamgr.ErrLimit, rdmamgr.ErrLimit}},
		{rdmamgr.ErrClosed, rdmapb.Code_CLOSED, []error{rdmamgr.ErrClosed, rdmamgr.ErrClosed}},
		{rdmamgr.ErrClosed, rdmapb.Code_CLOSED, []error{rdmamgr.ErrClosed, rdmamgr.ErrClosed}},
		{rdmamgr.ErrClosed, rdmapb.Code_CLOSED, []error{rdmamgr.ErrClosed, rdmamgr.ErrClosed}},
		{rdmamgr.ErrUnknownMessage, rdmapb.Code_UNKNOWN_MESSAGE, []error{rdmamgr.ErrUnknownMessage}},
		{rdmamgr.ErrUnknownPeer, rdmapb.Code_UNKNOWN_PEER, []error{rdmamgr.ErrUnknownPeer}},
		{rdmamgr.ErrNotLocal, rdmapb.Code_NOT_LOCAL, []error{rdmamgr.ErrNotLocal, rdmamgr.ErrInvalid}},
		{rdmamgr.ErrWrongPeer, rdmapb.Code_WRONG_PEER, []error{rdmamgr.ErrWrongPeer}},
		{rdmamgr.ErrReleased, rdmapb.Code_RELEASED, []error{rdmamgr.ErrReleased}},
		{rdmamgr.ErrBadKey, rdmapb.Code_BAD_KEY, []error{rdmamgr.ErrBadKey}},
		{rdmamgr.ErrVersion, rdmapb.Code_VERSION_MISMATCH, []error{rdmamgr.ErrVersion}},
		{rdmamgr.ErrProtocol, rdmapb.Code_PROTOCOL, []error{rdmamgr.ErrProtocol}},
		{rdmamgr.ErrPeerGone, rdmapb.Code_PEER_GONE, []error{rdmamgr.ErrPeerGone}},
		{context.DeadlineExceeded, rdmapb.Code_DEADLINE_EXCEEDED, []error{rdmamgr.ErrDeadline}},
	} {
		e := fromError(tc.err)
		if e.GetCode() != tc.code {
			t.Fatalf("%v: code %v, want %v", tc.err, e.GetCode(), tc.code)
		}
		back := toError(e)
		for _, w := range tc.want {
			if !errors.Is(back, w) {
				t.Fatalf("%v -> %v -> %v: does not wrap %v", tc.err, tc.code, back, w)
			}
		}
	}
	if fromError(nil) != nil || toError(nil) != nil || toError(&rdmapb.Error{}) != nil {
		t.Fatal("nil mapping")
	}
	if err := toError(&rdmapb.Error{Code: rdmapb.Code_INTERNAL, Message: "boom"}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("internal: %v", err)
	}
}
