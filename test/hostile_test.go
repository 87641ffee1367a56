//go:build linux

package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

const (
	hostileBufSize = 1 << 20
	hostileOpSize  = 64 << 10
)

// hostileEnv is what every hostile case works against: a daemon with a
// read-write buffer holding a known pattern and a read-only buffer that
// must stay zero.
type hostileEnv struct {
	d        *daemon
	dataAddr string
	qp       *queuepair.QueuePair

	rw, ro  buffer.Buffer // at the daemon
	scratch buffer.Buffer // at the daemon: the liveness check writes here
	pattern []byte        // rw's contents

	src, dst       buffer.Buffer // local
	srcMem, dstMem []byte
	r              *rand.Rand

	broken bool // a case left the daemon unable to serve
}

type hostileCase struct {
	name string
	// run does the hostile thing and returns the error it got.
	run func(t *testing.T, ctx context.Context, h *hostileEnv) error
	// want: run's error must match one of these with errors.Is.
	want []error
}

// TestHostile throws bad handles, forged and garbage connections,
// malformed frames and unknown messages at a daemon. Each case checks the
// sentinel of the error, that the daemon's memory is unchanged (the
// read-write buffer still holds its pattern, the read-only one is still
// zero) and that the daemon still serves puts, gets and status.
func TestHostile(t *testing.T) {
	checkLocalClean(t)
	h := newHostileEnv(t)

	cases := []hostileCase{
		{
			name: "wrong key",
			want: []error{buffer.ErrBadKey},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, hostileOpSize)
				bad.Key[7] ^= 0x20
				expect(t, "get", wait(h.qp.Get(h.dstSlice(0, hostileOpSize), bad)), buffer.ErrBadKey)
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), bad))
			},
		},
		{
			name: "offset beyond the buffer",
			want: []error{buffer.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, 4096)
				bad.Offset = h.rw.Length + 4096
				expect(t, "get", wait(h.qp.Get(h.dstSlice(0, 4096), bad)), buffer.ErrOutOfRange)
				return wait(h.qp.Put(h.srcSlice(0, 4096), bad))
			},
		},
		{
			name: "range across the end of the buffer",
			want: []error{buffer.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, 4096)
				bad.Offset = h.rw.Length - 100
				return wait(h.qp.Put(h.srcSlice(0, 4096), bad))
			},
		},
		{
			// The queue pair may catch this itself; either way the
			// sentinel is the same. The raw-frame case below makes the
			// daemon check it.
			name: "offset plus length overflows",
			want: []error{buffer.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, 4096)
				bad.Offset = math.MaxUint64 - 100
				return wait(h.qp.Put(h.srcSlice(0, 4096), bad))
			},
		},
		{
			name: "overflowing offset in a raw frame",
			want: []error{buffer.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				payload := make([]byte, 4096)
				fill(h.r, payload)
				req := frame(opWrite, 4096, 1, h.rw.Region, math.MaxUint64-7, h.rw.Key)
				if _, err := c.Write(append(req, payload...)); err != nil {
					return err
				}
				_, err := response(c, opWrite, 1)
				return err
			},
		},
		{
			name: "write to a read-only buffer",
			want: []error{buffer.ErrAccess},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), slice(h.ro, 0, hostileOpSize)))
			},
		},
		{
			// Forged access bits get past the queue pair's own check:
			// the daemon must refuse.
			name: "write to a read-only buffer with forged access bits",
			want: []error{buffer.ErrAccess},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				forged := slice(h.ro, 4096, hostileOpSize)
				forged.Access = buffer.AccessReadWrite
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), forged))
			},
		},
		{
			name: "released buffer",
			want: []error{buffer.ErrReleased},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				victim := remoteBuffer(t, h.d, hostileOpSize, buffer.AccessReadWrite)
				if err := h.d.client().ReleaseBuffer(ctx, victim); err != nil {
					t.Fatalf("release: %v", err)
				}
				expect(t, "get", wait(h.qp.Get(h.dstSlice(0, hostileOpSize), victim)), buffer.ErrReleased)
				expect(t, "second release", h.d.client().ReleaseBuffer(ctx, victim), buffer.ErrReleased)
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), victim))
			},
		},
		{
			// The owner releases a buffer while a peer hammers it: the
			// release waits for the transfers in flight, which succeed;
			// every later one fails with ErrReleased.
			name: "buffer released under in-flight transfers",
			want: []error{buffer.ErrReleased},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				victim := remoteBuffer(t, h.d, 4*hostileOpSize, buffer.AccessReadWrite)
				var started sync.WaitGroup
				errs := make([]error, 4)
				var wg sync.WaitGroup
				for w := range errs {
					off := uint64(w) * hostileOpSize
					l, rm := h.srcSlice(off, hostileOpSize), slice(victim, off, hostileOpSize)
					if w%2 == 1 {
						l = h.dstSlice(off, hostileOpSize)
					}
					started.Add(1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							var err error
							if w%2 == 0 {
								err = wait(h.qp.Put(l, rm))
							} else {
								err = wait(h.qp.Get(l, rm))
							}
							if i == 3 {
								started.Done()
							}
							if err != nil {
								if i < 3 {
									started.Done()
								}
								errs[w] = err
								return
							}
						}
					}()
				}
				started.Wait()
				if err := h.d.client().ReleaseBuffer(ctx, victim); err != nil {
					t.Errorf("release under load: %v", err)
				}
				wg.Wait()
				for w, err := range errs[1:] {
					expect(t, fmt.Sprintf("worker %d", w+1), err, buffer.ErrReleased)
				}
				return errs[0]
			},
		},
		{
			name: "release with a forged key",
			want: []error{buffer.ErrBadKey},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := h.rw
				bad.Key[0] ^= 1
				return h.d.client().ReleaseBuffer(ctx, bad)
			},
		},
		{
			name: "unknown peer: no such actor",
			want: []error{actor.ErrUnknownPeer},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				return requestQueuePair(ctx, protoactor.NewPID(h.d.addr, "no-such-manager"))
			},
		},
		{
			name: "unknown peer: closed port",
			want: []error{actor.ErrUnknownPeer},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := ln.Addr().String()
				ln.Close()
				ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				return requestQueuePair(ctx, protoactor.NewPID(addr, actor.DefaultName))
			},
		},
		{
			name: "garbage hello on the data port",
			want: []error{backend.ErrProtocol},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				if err := challenge(c); err != nil {
					t.Fatal(err)
				}
				junk := make([]byte, helloSize)
				fill(h.r, junk)
				copy(junk, "JUNK")
				if _, err := c.Write(junk); err != nil {
					return err
				}
				err := readAck(c)
				expect(t, "after the refusal", expectClosed(c), errConnClosed)
				return err
			},
		},
		{
			// More junk than a hello: the daemon acks and closes, or
			// resets the connection before the ack is read.
			name: "garbage flood on the data port",
			want: []error{backend.ErrProtocol, errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				junk := make([]byte, 256<<10)
				fill(h.r, junk)
				_, _ = c.Write(junk) // may fail once the daemon hangs up
				if err := challenge(c); err != nil {
					return err
				}
				if err := readAck(c); err != nil {
					return err
				}
				return expectClosed(c)
			},
		},
		{
			name: "hello with a forged token",
			want: []error{backend.ErrUnauthenticated},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				var tok [tokenSize]byte
				fill(h.r, tok[:])
				err := hello(c, wireVersion, tok)
				expect(t, "after the refusal", expectClosed(c), errConnClosed)
				return err
			},
		},
		{
			name: "hello with another protocol version",
			want: []error{backend.ErrVersion},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				var tok [tokenSize]byte
				fill(h.r, tok[:])
				return hello(c, wireVersion+1, tok)
			},
		},
		{
			name: "replayed token",
			want: []error{backend.ErrUnauthenticated},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				addr, toks, err := rawRoute(ctx, h.d, 1)
				if err != nil {
					t.Fatalf("raw handshake: %v", err)
				}
				if err := hello(dataConn(t, addr), wireVersion, toks[0]); err != nil {
					t.Fatalf("first use of the token: %v", err)
				}
				return hello(dataConn(t, addr), wireVersion, toks[0])
			},
		},
		{
			// An authenticated connection, a good frame, then a
			// malformed one: the daemon answers the first and hangs up
			// on the second without touching memory.
			name: "malformed frame after hello",
			want: []error{errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				if err := h.rawReadPattern(c, 7, 4096, 512); err != nil {
					t.Fatalf("good frame before the bad one: %v", err)
				}
				bad := make([]byte, reqHeaderSize)
				fill(h.r, bad)
				bad[0] = 0x7f // no such op
				if _, err := c.Write(bad); err != nil {
					return fmt.Errorf("%w: %w", errConnClosed, err)
				}
				return expectClosed(c)
			},
		},
		{
			name: "oversized frame after hello",
			want: []error{errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				req := frame(opWrite, math.MaxUint32, 1, h.rw.Region, 0, h.rw.Key)
				junk := make([]byte, 64<<10)
				fill(h.r, junk)
				_, _ = c.Write(append(req, junk...))
				return expectClosed(c)
			},
		},
		{
			// A refused write's payload is skipped: the connection stays
			// in step and serves the next frame. (A wrong key is answered
			// like an unknown region, RELEASED: peers cannot probe.)
			name: "refused frame keeps the stream in step",
			want: []error{buffer.ErrReleased},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				key := h.rw.Key
				key[15] ^= 0x80
				payload := make([]byte, 8192)
				fill(h.r, payload)
				if _, err := c.Write(append(frame(opWrite, 8192, 41, h.rw.Region, 0, key), payload...)); err != nil {
					return err
				}
				_, err := response(c, opWrite, 41)
				if rerr := h.rawReadPattern(c, 42, 100, 8192); rerr != nil {
					t.Errorf("frame after the refused one: %v", rerr)
				}
				return err
			},
		},
		{
			name: "garbage on the actor port",
			want: []error{errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c, err := net.DialTimeout("tcp", h.d.addr, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				junk := make([]byte, 4096)
				fill(h.r, junk)
				if _, err := c.Write(junk); err != nil {
					return fmt.Errorf("%w: %w", errConnClosed, err)
				}
				return expectClosed(c)
			},
		},
		{
			name: "unknown control message",
			want: []error{actor.ErrUnknownMessage},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				// Without a sender there is no one to answer: it must
				// just be dropped.
				local.sys.Root.Send(h.d.pid, &rdmapb.Pong{ManagerId: 1})
				res, err := request(ctx, h.d, &rdmapb.Pong{})
				if err != nil {
					t.Fatalf("no answer to an unknown message: %v", err)
				}
				er, ok := res.(*rdmapb.ErrorReply)
				if !ok {
					t.Fatalf("unknown message answered with %T %v", res, res)
				}
				if er.Error.GetCode() != rdmapb.Code_UNKNOWN_MESSAGE {
					t.Errorf("code %v, want UNKNOWN_MESSAGE", er.Error.GetCode())
				}
				return wireErr(er.Error)
			},
		},
		{
			name: "route handshake with another protocol version",
			want: []error{backend.ErrVersion},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				resp, err := handshake(ctx, h.d, &rdmapb.RouteHandshake{
					Version: actor.ProtocolVersion + 1, InitiatorId: 99, Backend: "tcp", Endpoint: []byte{1, 0, 1, 0},
				})
				if err != nil {
					t.Fatal(err)
				}
				return wireErr(resp.Error)
			},
		},
		{
			name: "route handshake for an unknown backend",
			want: []error{backend.ErrNotSupported},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				resp, err := handshake(ctx, h.d, &rdmapb.RouteHandshake{
					Version: actor.ProtocolVersion, InitiatorId: 99, Backend: "carrier-pigeon", Endpoint: []byte{1, 0, 1, 0},
				})
				if err != nil {
					t.Fatal(err)
				}
				return wireErr(resp.Error)
			},
		},
		{
			name: "route handshake with malformed endpoint info",
			want: []error{backend.ErrProtocol},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				resp, err := handshake(ctx, h.d, &rdmapb.RouteHandshake{
					Version: actor.ProtocolVersion, InitiatorId: 99, Backend: "tcp", Endpoint: []byte{1, 0, 0xff, 0xff, 0xff},
				})
				if err != nil {
					t.Fatal(err)
				}
				return wireErr(resp.Error)
			},
		},
		{
			// Queue pairs are only for callers in the manager's process.
			name: "queue pair requested from another process",
			want: []error{buffer.ErrInvalid},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				res, err := request(ctx, h.d, &rdmapb.RequestQueuePair{Peer: &rdmapb.ManagerRef{Address: local.addr, Id: actor.DefaultName}})
				if err != nil {
					t.Fatal(err)
				}
				r, ok := res.(*rdmapb.RequestQueuePairResponse)
				if !ok {
					t.Fatalf("reply %T %v", res, res)
				}
				return wireErr(r.Error)
			},
		},
		{
			// protoactor would deliver these to the manager: a peer must
			// not be able to stop it.
			name: "remote Stop and PoisonPill to the manager",
			want: []error{nil},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				local.sys.Root.Stop(h.d.pid)
				local.sys.Root.Poison(h.d.pid)
				// Messages from one sender arrive in order: if the
				// manager answers a later Ping, it outlived both.
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err := h.d.client().Ping(ctx)
				return err
			},
		},
		{
			name: "message of a type the daemon does not link",
			want: []error{actor.ErrUnknownMessage},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				local.sys.Root.Send(h.d.pid, unknownMessage())
				res, err := request(ctx, h.d, unknownMessage())
				if err != nil {
					t.Fatalf("no answer to a message of an unknown type: %v", err)
				}
				er, ok := res.(*rdmapb.ErrorReply)
				if !ok {
					t.Fatalf("answered with %T %v", res, res)
				}
				return wireErr(er.Error)
			},
		},
		{
			// Batches protoactor's endpoint reader would index out of
			// range: the daemon ends the stream, and only the stream.
			name: "malformed actor-protocol batches",
			want: []error{errRefused},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				names := []string{"rdmamgr.v1.Ping"}
				targets := []*protoactor.PID{h.d.pid}
				ping := mustMarshal(&rdmapb.Ping{})
				bad := map[string]*remote.RemoteMessage{
					"type index":    batch(names, targets, &remote.MessageEnvelope{TypeId: 5, MessageData: ping}),
					"negative type": batch(names, targets, &remote.MessageEnvelope{TypeId: -1, MessageData: ping}),
					"target index":  batch(names, targets, &remote.MessageEnvelope{Target: 3, MessageData: ping}),
					"no targets":    batch(names, nil, &remote.MessageEnvelope{MessageData: ping}),
					"sender index":  batch(names, targets, &remote.MessageEnvelope{Sender: 2, SenderRequestId: 7, MessageData: ping}),
					"serializer":    batch(names, targets, &remote.MessageEnvelope{SerializerId: 9, MessageData: ping}),
				}
				var errs []error
				for what, m := range bad {
					s := remotingStream(t, ctx, h.d)
					if err := s.Send(m); err != nil {
						t.Fatalf("%s: send: %v", what, err)
					}
					_, err := s.Recv()
					if err = refusedWith(err, codes.InvalidArgument); !errors.Is(err, errRefused) {
						t.Errorf("%s: got %v; want the stream ended with InvalidArgument", what, err)
					}
					errs = append(errs, err)
				}
				return errs[0]
			},
		},
		{
			// Messages the daemon drops without ending the stream: the
			// malformed batch after them shows the stream still read.
			name: "hostile actor-protocol messages",
			want: []error{errRefused},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				s := remotingStream(t, ctx, h.d)
				target := []*protoactor.PID{h.d.pid}
				send := func(what string, m *remote.RemoteMessage) {
					if err := s.Send(m); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				send("unknown type", batch([]string{"rdmamgr.hostiletest.Nope"}, target, &remote.MessageEnvelope{MessageData: []byte{1, 2, 3}}))
				send("json junk", batch([]string{"rdmamgr.v1.Ping"}, target, &remote.MessageEnvelope{SerializerId: 1, MessageData: []byte("{{{")}))
				send("terminated without who", batch([]string{"actor.Terminated"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.Terminated{})}))
				send("watch without watcher", batch([]string{"actor.Watch"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.Watch{})}))
				send("stop", batch([]string{"actor.Stop"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.Stop{})}))
				send("poison", batch([]string{"actor.PoisonPill"}, target, &remote.MessageEnvelope{MessageData: mustMarshal(&protoactor.PoisonPill{})}))
				send("malformed", batch([]string{"rdmamgr.v1.Ping"}, target, &remote.MessageEnvelope{TypeId: 1}))
				_, err := s.Recv()

				// Bytes that do not decode as their type: protoactor ends
				// the stream itself (with its own status).
				s2 := remotingStream(t, ctx, h.d)
				if err := s2.Send(batch([]string{"rdmamgr.v1.RequestBuffer"}, target, &remote.MessageEnvelope{MessageData: []byte{0xff, 0xff, 0xff}})); err != nil {
					t.Fatalf("proto junk: %v", err)
				}
				if _, err := s2.Recv(); status.Code(err) == codes.OK || ctx.Err() != nil {
					t.Errorf("proto junk: got %v; want the stream ended", err)
				}
				return refusedWith(err, codes.InvalidArgument)
			},
		},
		{
			// protoactor leaves these unimplemented (they panic).
			name: "unary actor-protocol calls",
			want: []error{errRefused},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				conn, err := grpc.DialContext(ctx, h.d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				c := remote.NewRemotingClient(conn)
				_, err = c.GetProcessDiagnostics(ctx, &remote.GetProcessDiagnosticsRequest{})
				expect(t, "GetProcessDiagnostics", refusedWith(err, codes.Unimplemented), errRefused)
				_, err = c.ListProcesses(ctx, &remote.ListProcessesRequest{})
				return refusedWith(err, codes.Unimplemented)
			},
		},
		{
			name: "huge buffer request",
			want: []error{backend.ErrLimit},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				_, err := h.d.client().RequestBuffer(ctx, 1<<50, buffer.AccessReadWrite)
				return err
			},
		},
	}

	for _, tc := range cases {
		if h.broken {
			t.Fatalf("the daemon stopped serving: the remaining cases would only repeat that\nstderr:\n%s", h.d.stderr)
		}
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			err := tc.run(t, ctx, h)
			if !isAny(err, tc.want) {
				t.Errorf("got error %v; want one matching %v", err, tc.want)
			} else {
				t.Logf("got %v", err)
			}
			h.checkIntact(t)
			h.checkServing(t)
		})
	}

	st, err := h.d.client().Status(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.RejectedOps == 0 {
		t.Errorf("the daemon counted no rejected operations")
	}
}

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
	if err := wait(h.qp.Put(h.src, h.rw)); err != nil {
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
	if err := wait(h.qp.Get(h.dst, h.rw)); err != nil {
		t.Fatalf("read back the read-write buffer: %v", err)
	}
	if !bytes.Equal(h.dstMem, h.pattern) {
		t.Errorf("the daemon's read-write buffer changed: %s", firstDiff(h.dstMem, h.pattern))
	}
	fill(h.r, h.dstMem)
	if err := wait(h.qp.Get(h.dst, h.ro)); err != nil {
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
	if err := wait(h.qp.Put(src, h.scratch)); err != nil {
		t.Fatalf("the daemon stopped serving puts: %v", err)
	}
	if err := wait(h.qp.Get(dst, h.scratch)); err != nil {
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
