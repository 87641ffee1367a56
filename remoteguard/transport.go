package remoteguard

import (
	"fmt"
	"net"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"

	"github.com/rdmamgr/rdmamgr/internal/control"
)

// Remote is the control transport of one actor system: a gRPC server that
// speaks protoactor's Remoting protocol (the same service, messages and
// framing as protoactor's own remote, so peers of either kind talk to it)
// and one client endpoint per peer address (transport_writer.go).
//
// It is ours, not protoactor's remote.Remote, because remote.Start writes
// grpc's global logger (grpclog.SetLoggerV2) every time a remote starts,
// with a plain store that every grpc goroutine of the process reads when
// it logs: starting a node while another node, or the program's own gRPC,
// talks was a data race that no start order avoids (issue 22). Nothing
// here writes grpc's global state.
type Remote struct {
	sys     *protoactor.ActorSystem
	srv     *grpc.Server
	dial    []grpc.DialOption
	batch   int
	queue   int
	serveWG sync.WaitGroup // the server's Serve goroutine
	unreach *control.Unreachable

	mu     sync.Mutex
	eps    map[string]*endpoint // guarded by mu: live client endpoints by address
	closed bool                 // guarded by mu
	epWG   sync.WaitGroup       // every endpoint's goroutines; Add under mu while !closed
}

// maxQueued bounds the messages waiting for one peer's endpoint; past it a
// message is a dead letter (its sender's request fails at once).
const maxQueued = 1 << 16

// newRemote builds a transport for sys that serves with srvOpts and dials
// peers with dialOpts, sending at most batch envelopes per gRPC message.
// It does no I/O.
func newRemote(sys *protoactor.ActorSystem, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption, batch int) *Remote {
	r := &Remote{sys: sys, dial: dialOpts, batch: batch, queue: maxQueued, eps: make(map[string]*endpoint),
		unreach: control.UnreachableOf(sys)}
	r.srv = grpc.NewServer(srvOpts...)
	remote.RegisterRemotingServer(r.srv, &reader{r: r})
	return r
}

// serve listens on bind ("host:port", IPv6 hosts in brackets), makes the
// actor system resolve other addresses through this transport, and serves.
// advertised ("" for the listener's own address) is the address peers use.
// It returns that address.
func (r *Remote) serve(bind, advertised string) (string, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return "", fmt.Errorf("listen for the control plane on %s: %w", bind, err)
	}
	if advertised == "" {
		advertised = lis.Addr().String()
	}
	r.sys.ProcessRegistry.RegisterAddressResolver(r.resolve)
	r.sys.ProcessRegistry.Address = advertised
	r.serveWG.Add(1)
	go func() {
		defer r.serveWG.Done()
		_ = r.srv.Serve(lis) // returns when Stop closes the listener
	}()
	return advertised, nil
}

// resolve is the actor system's resolver for PIDs of other processes.
func (r *Remote) resolve(pid *protoactor.PID) (protoactor.Process, bool) {
	return &process{r: r}, true
}

// stop closes every endpoint and the server, and waits until nothing of
// the transport runs. Idempotent.
func (r *Remote) stop() {
	r.mu.Lock()
	r.closed = true
	eps := make([]*endpoint, 0, len(r.eps))
	for _, ep := range r.eps {
		eps = append(eps, ep)
	}
	clear(r.eps)
	r.mu.Unlock()
	for _, ep := range eps {
		ep.close()
	}
	r.srv.Stop() // closes listeners and connections; waits for handlers (WaitForHandlers)
	r.serveWG.Wait()
	r.epWG.Wait()
}

// process stands for every actor of another process: what is sent to it
// goes to the endpoint of its address.
type process struct{ r *Remote }

var _ protoactor.Process = (*process)(nil)

func (p *process) SendUserMessage(pid *protoactor.PID, message any) {
	header, msg, sender := protoactor.UnwrapEnvelope(message)
	p.r.send(&outMsg{target: pid, sender: sender, header: header, msg: msg})
}

// SendSystemMessage sends a system message as a plain one, as protoactor
// does. Watching an actor of another process is not supported (nothing
// here uses it, and peers' watches are refused): Watch and Unwatch are
// dropped.
func (p *process) SendSystemMessage(pid *protoactor.PID, message any) {
	switch message.(type) {
	case *protoactor.Watch, *protoactor.Unwatch:
		return
	}
	p.r.send(&outMsg{target: pid, msg: message})
}

func (p *process) Stop(pid *protoactor.PID) { p.SendSystemMessage(pid, &protoactor.Stop{}) }
