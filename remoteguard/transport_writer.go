package remoteguard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// outMsg is one message on its way to another process.
type outMsg struct {
	target, sender *protoactor.PID
	header         protoactor.ReadonlyMessageHeader
	msg            any
}

// endpoint carries the messages of this process to one peer address over
// one Remoting stream. It dials on its first message; when the stream
// fails or the peer says it leaves, it dead-letters what is queued (a
// request's sender learns at once), publishes protoactor's
// EndpointTerminatedEvent (the manager takes the peer's inbound routes
// down) and is gone: the next message dials anew.
type endpoint struct {
	r      *Remote
	addr   string
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: the queue is not empty

	mu    sync.Mutex
	queue []*outMsg // guarded by mu
	dead  bool      // guarded by mu: takes no more messages
}

var errDisconnect = errors.New("peer disconnected")

// send queues m for its target's endpoint, starting one if needed.
func (r *Remote) send(m *outMsg) {
	for try := 0; try < 2; try++ {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			break
		}
		ep := r.eps[m.target.Address]
		if ep == nil {
			ctx, cancel := context.WithCancel(context.Background())
			ep = &endpoint{r: r, addr: m.target.Address, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1)}
			r.eps[ep.addr] = ep
			r.epWG.Add(1)
			go ep.run()
		}
		r.mu.Unlock()
		if ep.enqueue(m) {
			return
		}
	}
	r.deadLetter(m)
}

// deadLetter tells a local sender at once that m was not delivered (its
// request fails with protoactor's dead-letter error rather than waiting
// out its timeout).
func (r *Remote) deadLetter(m *outMsg) {
	if m.sender != nil && m.sender.Address == r.sys.Address() {
		r.sys.Root.Send(m.sender, &protoactor.DeadLetterResponse{Target: m.target})
		return
	}
	r.sys.EventStream.Publish(&protoactor.DeadLetterEvent{PID: m.target, Message: m.msg, Sender: m.sender})
}

// enqueue adds m unless the endpoint is dead or full; it reports whether
// it took m (a full queue takes it into the dead letters).
func (ep *endpoint) enqueue(m *outMsg) bool {
	ep.mu.Lock()
	if ep.dead {
		ep.mu.Unlock()
		return false
	}
	full := len(ep.queue) >= ep.r.queue
	if !full {
		ep.queue = append(ep.queue, m)
	}
	ep.mu.Unlock()
	if full {
		ep.r.deadLetter(m)
		return true
	}
	select {
	case ep.wake <- struct{}{}:
	default:
	}
	return true
}

// take removes up to n queued messages.
func (ep *endpoint) take(n int) []*outMsg {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	k := min(n, len(ep.queue))
	if k == 0 {
		return nil
	}
	out := make([]*outMsg, k)
	copy(out, ep.queue)
	clear(ep.queue[:k])
	ep.queue = ep.queue[k:]
	if len(ep.queue) == 0 {
		ep.queue = nil
	}
	return out
}

func (ep *endpoint) close() { ep.cancel() }

// run is the endpoint's goroutine: it connects, sends until the stream
// fails or the endpoint is closed, then fails what is left.
func (ep *endpoint) run() {
	defer ep.r.epWG.Done()
	err := ep.serve()
	ep.cancel()
	ep.fail(err)
}

// fail takes the endpoint out of service: no message is taken after it,
// and every queued one is a dead letter.
func (ep *endpoint) fail(error) {
	r := ep.r
	r.mu.Lock()
	if r.eps[ep.addr] == ep {
		delete(r.eps, ep.addr)
	}
	r.mu.Unlock()
	ep.mu.Lock()
	ep.dead = true
	q := ep.queue
	ep.queue = nil
	ep.mu.Unlock()
	for _, m := range q {
		r.deadLetter(m)
	}
	r.sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: ep.addr})
}

// serve dials the peer, opens the Remoting stream, and sends batches until
// the stream fails, the peer disconnects, or the endpoint is closed.
func (ep *endpoint) serve() error {
	conn, err := grpc.NewClient("passthrough:///"+ep.addr, ep.r.dial...)
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := remote.NewRemotingClient(conn).Receive(ep.ctx)
	if err != nil {
		ep.r.unreach.Note(ep.addr, whyUnreachable(err))
		return err
	}
	if err := ep.connect(stream); err != nil {
		ep.r.unreach.Note(ep.addr, whyUnreachable(err))
		return err
	}
	ep.r.unreach.Note(ep.addr, nil)
	broken := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the peer sends nothing after its ConnectResponse but a DisconnectRequest
		defer wg.Done()
		for {
			m, err := stream.Recv()
			if err != nil {
				broken <- err
				return
			}
			if _, ok := m.MessageType.(*remote.RemoteMessage_DisconnectRequest); ok {
				broken <- errDisconnect
				return
			}
		}
	}()
	defer wg.Wait()
	defer ep.cancel() // ends the Recv above
	for {
		if batch := ep.take(ep.r.batch); batch != nil {
			if err := ep.sendBatch(stream, batch); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ep.wake:
		case err := <-broken:
			return err
		case <-ep.ctx.Done():
			return ep.ctx.Err()
		}
	}
}

// connect sends the connect request and waits for the peer's answer.
func (ep *endpoint) connect(stream remote.Remoting_ReceiveClient) error {
	sys := ep.r.sys
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{
		ConnectRequest: &remote.ConnectRequest{ConnectionType: &remote.ConnectRequest_ServerConnection{
			ServerConnection: &remote.ServerConnection{SystemId: sys.ID, Address: sys.Address()},
		}},
	}}); err != nil {
		return err
	}
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	if _, ok := m.MessageType.(*remote.RemoteMessage_ConnectResponse); !ok {
		return fmt.Errorf("peer %s answered the connect request with %T", ep.addr, m.MessageType)
	}
	return nil
}

// sendBatch encodes msgs as one MessageBatch and sends it; a message that
// does not serialize is a dead letter. On a send error every message of
// the batch is.
func (ep *endpoint) sendBatch(stream remote.Remoting_ReceiveClient, msgs []*outMsg) error {
	b := &remote.MessageBatch{}
	types := make(map[string]int32)
	targets := make(map[string]int32)
	senders := make(map[string]int32)
	sent := msgs[:0:0]
	for _, m := range msgs {
		data, typeName, err := remote.Serialize(m.msg, protoSerializerID)
		if err != nil {
			ep.r.deadLetter(m)
			continue
		}
		e := &remote.MessageEnvelope{MessageData: data, SerializerId: protoSerializerID}
		e.TypeId = lookup(types, typeName, func() { b.TypeNames = append(b.TypeNames, typeName) })
		e.Target = lookup(targets, m.target.Address+"/"+m.target.Id, func() { b.Targets = append(b.Targets, bare(m.target)) })
		e.TargetRequestId = m.target.RequestId
		if m.sender != nil {
			e.Sender = 1 + lookup(senders, m.sender.Address+"/"+m.sender.Id, func() { b.Senders = append(b.Senders, bare(m.sender)) })
			e.SenderRequestId = m.sender.RequestId
		}
		if m.header != nil && m.header.Length() > 0 {
			e.MessageHeader = &remote.MessageHeader{HeaderData: m.header.ToMap()}
		}
		b.Envelopes = append(b.Envelopes, e)
		sent = append(sent, m)
	}
	if len(b.Envelopes) == 0 {
		return nil
	}
	err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}})
	if err != nil {
		for _, m := range sent {
			ep.r.deadLetter(m)
		}
	}
	return err
}

// whyUnreachable is err as a caller should read it: a gRPC status's
// message (the dial or handshake error) without the status wrapping.
func whyUnreachable(err error) error {
	if s, ok := status.FromError(err); ok && s.Message() != "" {
		return errors.New(s.Message())
	}
	return err
}

// lookup returns key's index in m, adding it (and calling add) if new.
func lookup(m map[string]int32, key string, add func()) int32 {
	if id, ok := m[key]; ok {
		return id
	}
	id := int32(len(m))
	m[key] = id
	add()
	return id
}

// bare is p without its request id (that travels per envelope).
func bare(p *protoactor.PID) *protoactor.PID {
	c := proto.Clone(p).(*protoactor.PID)
	c.RequestId = 0
	return c
}
