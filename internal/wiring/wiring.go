// Package wiring lets the packages of the module reach what their public
// API does not show: a public package sets a hook here in its init, and
// another package of the module calls it. Programs outside the module
// cannot import an internal package, so these stay out of the public API.
//
// ManagerRegistry and PeerClient are set by package actor and used by
// package node, the one place that builds backends over a manager's
// registry and hands out clients of peers; SharedRoute, set by package
// actor too, gives the host agent (internal/hostagent) a manager's shared
// route to a peer. NewQueuePair
// is set by package queuepair and used by package actor, which binds queue
// pairs to routes (and by the backends' tests). SetBackend and NewBackend
// carry the backends' constructors (backends.go): each backend package
// sets its own, and package node builds the backends over the manager's
// registry. SetResolver, whose setters backend/tcp and backend/ibverbs add,
// is used by a host agent (issue 26) to serve frames naming its attached
// processes.
package wiring

import (
	"context"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// ManagerRegistry returns the registry of an *actor.Manager.
var ManagerRegistry func(manager any) *memreg.Registry

// PeerClient returns an *actor.Client of the manager named name at addr,
// sending from an *actor.Manager's actor system with its request timeout
// and message limit (node.Node.ClientOf).
var PeerClient func(manager any, addr, name string) any

// SharedRoute returns an *actor.Manager's route k to the manager name at
// addr ("host:port"), set up if needed, the peer manager's id, the
// route's backend, and a release that drops this reference once. Route 0
// is shared with every other user of that peer (its queue pairs too);
// route k > 0 (k < 1024) is another route to that peer, shared only by
// callers that ask for k, counted against the manager's MaxRoutes. A
// host agent (internal/hostagent) posts its processes' operations on
// them: route 0 to each far agent, and more on ibverbs (a route is one
// queue pair there).
var SharedRoute func(manager any, ctx context.Context, addr, name string, k int) (route backend.Route, peerID uint64, kind backend.Kind, release func(), err error)

// NewQueuePair binds a *queuepair.QueuePair to route; it does no I/O.
var NewQueuePair func(id, peerID uint64, route backend.Route, local qpbind.Resolver, opt qpbind.Options) any

// SetResolver gives a backend built by NewBackend a host agent's resolver
// (package agentapi): it then serves frames that name an attached process
// (a Via). Each backend package that serves them adds its setter
// (AddResolverSetter: backend/tcp, backend/ibverbs); SetResolver asks each
// in turn and reports false when none takes b. r == nil takes it away
// (frames with a Via are then refused with ErrNotSupported, as before any
// was set). Call it before the backend's Start; a frame served meanwhile
// sees the old one or the new one.
func SetResolver(b backend.Backend, r agentapi.Resolver) bool {
	for _, set := range resolverSetters {
		if set(b, r) {
			return true
		}
	}
	return false
}

// resolverSetters: written only by the backends' inits.
var resolverSetters []func(b backend.Backend, r agentapi.Resolver) bool

// AddResolverSetter adds a backend package's setter to SetResolver: set
// reports false for a backend that is not its own. Call it from init.
func AddResolverSetter(set func(b backend.Backend, r agentapi.Resolver) bool) {
	resolverSetters = append(resolverSetters, set)
}
