// Package agent is the process side of the host agent (issue 26): a
// backend of kind "agent" whose routes reach processes of other hosts
// through the agents both ends are attached to. Package node builds it
// after shm when node.Config.Agent names the agent's socket (`--agent`):
// its order is shm, agent, tcp (node leaves ibverbs to the agent).
//
// # Attaching
//
// Start attaches to the agent's unix socket (SOCK_SEQPACKET; the protocol
// is internal/agentwire's): the agent's hello, our auth (the deployment's
// MAC over its nonce, our pid, manager id and address; the agent checks
// our pid and uid with SO_PEERCRED), then the shm handshake: the agent is
// an shm initiator of this process, and our own shm backend accepts its
// route (wiring.SHMAcceptAgentRoute marks it as our agent's, the one
// connection whose origin ids it honours), so the agent maps only what our
// shm owner side grants for a key. Welcome gives our slot at the agent,
// the agent's address and its host id. An agent that is not there is
// logged and tried again every Config.Retry (1 s) in the background;
// meanwhile the backend refuses routes and the manager goes direct. One
// that goes (its socket ends) is re-attached when it is back, without
// restarting the process.
//
// # Routes
//
// PrepareRoute refuses with ErrNotSupported while not attached; its info
// names our agent's host id, our slot and our agent's address. AcceptRoute
// refuses with ErrNotSupported while not attached or when the initiator's
// host is ours (shm is the way there), and answers our slot and agent. The
// route forwards every work request (Put, Get, PutWithImm, Send, the
// atomics; PostList too) to our agent, naming the local memory by its
// memreg region (id, key) and slice and the target by its slot at its
// agent (via); records are batched, one packet per batch, in posting
// order (the poster writes the packet itself when nobody else is writing,
// never waiting on the socket: should it be full, because the agent does
// not read, the attachment's writer goroutine takes the packets over; a
// PostList chain goes in one packet), and the agent posts them in order on its one route to the far
// agent, which keeps RC's ordering. The route completes each request on
// the agent's done (a refusal carries its code's sentinel), cancels
// through the agent (the outcome is the cause unless it completed first)
// and says "via host agent (slot N at agent ADDR)" in its reason (status,
// "route up" log), then the backend of the agents' route: " over tcp" or
// " over ibverbs" as our agent answers its ask at setup (agentwire version
// 3; the agent sets that route up if it has none), ", backend unknown
// yet" when it does not within 4 s or the setup's context; nothing from
// an agent that refuses version 3 (attach falls back to version 2 and
// never asks). An answer naming no backend the protocol defines is a
// protocol error (the attachment ends). A
// cancelled operation is reported only on the agent's done, which the
// agent sends once the operation is off its far route (never posted, or
// reported there: the agent's read into its proxy of our pages has
// ended, its write from them too): reported means
// finished through the agent too (TestCancelStressThroughAgents, issue 9's
// cancel stress through two real agents, counts the stale bytes: 0).
//
// The agent maps our memory as any peer does, through our shm owner side:
// so only memfd-backed regions reach it (node sets memreg's SetUnpooled:
// every buffer a memfd of its own; caller memory registered in place is
// refused at Post with ErrNotSupported), and a region we revoked is closed
// to it too: an operation on such a region of ours goes through a bounce
// region (bounce.go), the one extra copy of the path.
//
// # Failure
//
// When the socket ends (the agent died or broke the protocol) every route
// on the attachment ends and every operation in flight fails with
// ErrPeerGone ("host agent gone"): the agent closes its socket only once
// it can touch none of our memory any more (a dying process's memory is
// unmapped before its sockets close), so reported means finished. An agent
// that says gone, or a write of ours that fails (the agent shut its read
// side: it is ending us), is not that yet: the routes on it end at once
// ("host agent gone": no post is taken any more), our write side closes,
// and the operations in flight are reported with the agent's answers, or
// at the socket's end (CloseTimeout at most). A
// done with PEER_GONE (the target left its agent, or its agent restarted
// since the route was set up: a route names the far agent's manager id
// with the target's slot, and a slot of another incarnation is refused)
// ends that route, so the manager sets up a new one. The agent dials
// only far agents (its cluster's members when it has one; a far end whose
// route handshake says it is no agent is dropped): an operation whose
// target's agent address is not one fails with ErrUnauthenticated, and
// after 8 failed far routes within a minute, one that needs a new far
// route fails with ErrLimit until the minute ends. Events and messages
// for us wait in our own queue at our agent: one more past it is refused
// to its sender with ErrLimit. Route.Close and Backend.Close cancel what
// is in flight and wait for the agent's answers, at most CloseTimeout.
//
// The package builds everywhere; off Linux attaching fails with
// ErrNotSupported (no agent there).
package agent
