package remoteguard

import (
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"
)

// Stop stops a transport started by Start and returns once nothing of it
// runs on: its endpoints and their connections are closed, the server
// is stopped (Stop waits for its stream handlers: grpc.WaitForHandlers),
// and every client connection our dial options opened is closed. Peers
// learn that we left when the connection closes. Idempotent.
func Stop(sys *protoactor.ActorSystem, r *Remote) {
	r.stop()
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
