package remoteguard

import (
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
)

// Stop stops a remote started by Start and returns once nothing of it runs
// on: protoactor's hard shutdown stops the server (whose stream handlers
// Stop waits for: grpc.WaitForHandlers), and then every client connection
// our dial options opened is closed here, or waited for if a protoactor
// goroutine is closing it right now. Without that wait a connection's
// teardown could still be logging through grpc's global logger when the
// process starts its next remote, whose remote.Start writes that logger
// (a data race; protoactor gives no hook to wait for its endpoint writers).
//
// Not protoactor's graceful shutdown: it sends on a channel that its
// endpoint reader closes when a peer's stream ends (a data race, and a
// possible "send on closed channel" panic, whenever a peer is connected as
// we stop). Peers learn that we left when the connection closes.
func Stop(sys *protoactor.ActorSystem, r *remote.Remote) {
	r.Shutdown(false)
	set := streamsOf(sys)
	set.closeAll()
	streamSets.Delete(sys)
}

// streamSet is the live Remoting streams our dial options opened for one
// actor system.
type streamSet struct {
	mu   sync.Mutex
	live map[*closingStream]struct{} // guarded by mu
}

// streamSets maps an actor system to its streamSet.
var streamSets sync.Map // *protoactor.ActorSystem -> *streamSet

func streamsOf(sys *protoactor.ActorSystem) *streamSet {
	v, _ := streamSets.LoadOrStore(sys, &streamSet{live: make(map[*closingStream]struct{})})
	return v.(*streamSet)
}

func (set *streamSet) add(s *closingStream) {
	set.mu.Lock()
	set.live[s] = struct{}{}
	set.mu.Unlock()
}

func (set *streamSet) remove(s *closingStream) {
	set.mu.Lock()
	delete(set.live, s)
	set.mu.Unlock()
}

// closeAll closes every live stream's connection, waiting for closes that
// are under way.
func (set *streamSet) closeAll() {
	set.mu.Lock()
	all := make([]*closingStream, 0, len(set.live))
	for s := range set.live {
		all = append(all, s)
	}
	set.mu.Unlock()
	for _, s := range all {
		s.close()
	}
}
