// Package hostagent is the host agent's side of issue 26 (rdmamgr serve
// --agent-socket): one agent per host joins the processes of the host to
// the other hosts' agents over a fixed number of data connections per pair
// of hosts, whatever the number of processes: N (node.HostAgent.Routes, at
// least MinRoutes), half on each agent's route to the other (a TCP route
// carries requests one way: its dialer posts, the far end serves; the
// lower manager id's route takes the extra one of an odd N: RouteConns).
// The N are there once both agents have posted to each other. The route
// to a far agent is the manager's, so it takes the manager's first backend
// both agents run: ibverbs when both have a device (one RC queue pair per
// route, two per pair of hosts: a route is one queue pair), else TCP.
//
// An Agent runs beside a node's manager (its registry, its TCP backend,
// and Config.Serving: its ibverbs backend, which serves far agents'
// frames through the same Resolver):
//
//   - An attach listener on a filesystem unix socket (SOCK_SEQPACKET, mode
//     0660, removed by Close). A connection's user must be one the agent
//     serves (its own, Config.AllowUIDs; SO_PEERCRED, at accept); at most
//     64 connections are in their handshake at once, each for at most 5 s.
//     The handshake (package agentwire) proves the deployment's secret
//     (a MAC over the agent's nonce, the pid, the manager id and address),
//     checks the pid against the kernel's (SO_PEERCRED), and then runs the
//     shm route handshake over the socket: the agent is an shm initiator
//     of the process (its own shm backend over an empty registry), and the
//     process's shm owner code checks every map request (key, access,
//     lease, revocation). The process gets a slot (1..65535, its "via";
//     a slot is reused only after every other was, and with a new
//     generation).
//   - Proxies: a region of an attached process the agent uses is mapped
//     once (shm MapProxy) and registered in the manager's registry as a
//     proxy region (memreg.RegisterProxy, behind the state-table slot's
//     gate), cached by (slot, region), checked by key. The TCP backend
//     serves frames that name a process (their via) through the Resolver
//     (internal/agentapi), on the proxy, in the process's pages: no extra
//     copy. A cut notice from the process (revoke, release, lease) and the
//     end of the process release the proxy: Release cuts the frames in
//     flight into sinks and waits for their references, so the process's
//     own Revoke returns at once.
//   - The executor: a process's posts (package agentwire) run in posting
//     order on the manager's shared route to the far agent (one route to
//     each far agent, refcounted in the manager: wiring.SharedRoute), as
//     WorkRequests whose Local is the proxy of the process's own region
//     (held by a local reference for the operation's life), whose Via
//     names the target process at the far agent and whose Origin is the
//     process's manager id; done answers each once it completed (batched:
//     one write per batch; the completing goroutine writes it when nobody
//     else is writing, never waiting on the socket: should it be full, the
//     process's writer goroutine takes over). A cancel cancels it on the route. The reader
//     posts itself when the proxy and the route are there and nothing is
//     queued before (no hand-off; a packet's run of such posts on one far
//     route as one chain, backend.ListPoster: one write on the
//     connection); else the process's poster does, in order. One that
//     meets a stale proxy at the far agent (ibverbs: its rkey died with a
//     cut, and the RC route with it; agentapi.ErrStaleProxy) is posted
//     once more, on a fresh route, for the far agent's own answer.
//   - Events and messages for an attached process (the TCP server's
//     Inbox(via)): a PutWithImm's event goes over the process's shm route
//     as a notice (no copy: the bytes are in place) naming the far process
//     as its Peer (an origin the TCP server takes only from another
//     agent's route: the agent's TCP backend marks the routes it sets up
//     as an agent's; from any other peer it is refused NOT_SUPPORTED); a Send is staged in the agent and handed on as an shm
//     Send, and the process's refusal (no receive posted, too small) is
//     the sender's answer (agentapi.CheckedLanding). Both wait for the
//     process's answer (5 s at most), which keeps a connection's order.
//
// The process's own (local) memory is mapped through the same owner
// checks as a far process's: its region must grant what the agent does
// with it (read for a Put's source, write for a Get's target), must be
// memfd-backed (a process attached to an agent allocates no pooled
// regions: memreg.SetUnpooled) and not revoked. Direct routes need none of
// this: these operations fail through an agent (ErrAccess,
// ErrNotSupported, ErrRevoked) where they work direct.
//
// A slot means something only at the agent incarnation that gave it: a
// post names the far agent's manager id too (random per agent start; the
// process-side route answer carries it), and the executor refuses with
// PEER_GONE a post whose id is not the peer id of its shared route to that
// address (the far agent restarted there and hands its slots out afresh):
// the process's route ends, and the next one asks the target for its new
// slot. What is left: within one agent's life a slot comes back only
// after the other 65534 were handed out (live ones are skipped), and then
// a route idle through all of them would reach the slot's new holder. The
// slot's generation (agentwire.Welcome) would close that, but a TCP
// request header has no room for it (bytes 2:4 carry the slot, the rest
// is taken) and it is not checked.
//
// A far agent whose host leaves the cluster (its etcd membership record
// goes: membership.Follow calls the manager's DropPeer, as a serve
// --etcd daemon does) has the shared route to it ended: it is the
// manager's own route, so DropPeer fails it with ErrPeerGone, the
// operations in flight through it are answered PEER_GONE, and the next
// post sets up a new route (which fails PEER_GONE while the host is away).
//
// A process that goes (its socket or its shm route ends) loses its slot at
// once (frames for it are answered ErrPeerGone), its operations are
// cancelled with ErrPeerGone, and its proxies released. Close sends every
// process gone, then ends them as above, and waits.
//
// Linux only: elsewhere New fails with rdmamgr.ErrNotSupported.
package hostagent
