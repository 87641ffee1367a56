// Package hostagent is the host agent's side of issue 26 (rdmamgr serve
// --agent-socket): one agent per host joins the processes of the host to
// the other hosts' agents over a fixed number of data connections per pair
// of hosts, whatever the number of processes: N (node.HostAgent.Routes, at
// least MinRoutes), half on each agent's routes to the other (a route
// carries requests one way: its dialer posts, the far end serves; the
// lower manager id's routes take the extra one of an odd N: RouteConns).
// The N are there once both agents have posted to each other. The routes
// to a far agent are the manager's (wiring.SharedRoute: route 0, the one
// its queue pairs share, and routes 1, 2, ... kept apart, "addr/name#k"
// in its status and logs), so they take the manager's first backend both
// agents run: ibverbs when both have a device, else TCP. On TCP the agent
// keeps one route to each far agent (its connections are its half of N:
// RouteConns, through the TCP backend's ConnsFor); on ibverbs a route is
// one RC queue pair, so it keeps RouteConns(N) routes to each (route 0's
// backend decides; Config.Routes is N), and the pair of hosts holds N
// queue pairs once both agents posted. Every route counts against the
// manager's MaxRoutes: a route k > 0 it refuses is left out (the
// operations pinned to it take route 0, for the set's life).
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
//     lease, revocation). The process gets a slot (1..65535, its "via"),
//     never handed out before in the agent's life (below).
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
//     order on the manager's routes to the far agent (its set, above:
//     each refcounted in the manager, all dropped together when the far
//     agent restarted, one that went down replaced alone; every operation
//     from one process to one far process, its (slot, via) pair, takes
//     the one route a hash of the pair pins, so RC's order holds between
//     them: a PutWithImm or a Send follows every Put its process posted
//     to that far process before it; other pairs spread over the set), as
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
//     once more, on a fresh route in place of the one that died (the
//     set's others serve on), for the far agent's own answer.
//   - Events and messages for an attached process (the TCP server's
//     Inbox(via)): a PutWithImm's event goes over the process's shm route
//     as a notice (no copy: the bytes are in place) naming the far process
//     as its Peer (an origin the TCP server takes only from another
//     agent's route: the agent's TCP backend marks the routes it sets up
//     as an agent's; from any other peer it is refused NOT_SUPPORTED); a
//     Send is staged in the agent and handed on as an shm Send, and the
//     process's refusal (no receive posted, too small) is the sender's
//     answer. Neither holds up the connection between the two agents,
//     which every process shares: each process has its own queue of
//     notices (at most 1024, and 64 MiB of staged messages) and a
//     deliverer that hands them on one at a time, in order; each is
//     answered within 5 s of its queueing (DEADLINE if the process has
//     not taken it by then); the TCP server (and an ibverbs route's worker)
//     answers the write-imm or send once the process answered
//     (agentapi.AsyncInbox, AsyncLanding) and serves the route's next
//     frames (control messages) meanwhile. One more for a full queue is
//     refused at once with ErrLimit (LIMIT: the direct path's overflow),
//     so a process that never answers costs only its own notices. (The
//     first use of a region still maps it on the connection: a process
//     that leaves a map request unanswered holds the connection once, up
//     to the resolve's bound, and is then ended: its shm route fails on
//     the silence, shm's 5 s rule. The route between the agents stays up
//     meanwhile: the held connection answers the heartbeat.)
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
// PEER_GONE a post whose id is not the peer id of its route to that
// address (the far agent restarted there and hands its slots out afresh):
// the process's route ends, and the next one asks the target for its new
// slot. Within one agent's life a slot is never handed out twice: a frame
// between agents carries the slot alone (TCP request bytes 2:4; a READ's
// or WRITE's header has no room for the Welcome's generation, which is
// always 1), so a route set up to a slot's old holder and idle since would
// otherwise reach its new one (a Send needs no key). A gone process's slot
// answers ErrPeerGone for good; after 65535 attaches the agent refuses
// more with rdmamgr.ErrLimit (the process goes direct, as without an
// agent) until it is restarted (a new manager id: every slot is fresh).
//
// The agent dials only far agents. A post names its far agent by address,
// and the process may be hostile: so, when the agent has a cluster
// (SetFarCheck; a serve --etcd daemon sets its members), an address that
// is no member's is refused before any dial (each route of a set's); and
// a route whose handshake says the far end is no host agent (a TCP
// responder with a resolver says it is, answering another agent; an
// ibverbs one by its route info's agent flag: agentapi.FarAgent) is dropped with its set, and the address is refused
// without a new dial for a minute. Either refusal answers the post ErrNotAgent (UNAUTHENTICATED to the process).
// A process whose far-route setups failed 8 times within a minute (the
// refusals above, unreachable addresses) has its posts that need a new far
// route refused with ErrDialBudget (LIMIT) until the minute ends; routes
// that are up serve it on, and other processes are not held to its count.
// (Routes of backends that cannot tell an agent, none but TCP so far, are
// taken as the handshake found them.)
//
// A process may ask (agentwire version 3) which backend our route to a
// far agent runs on, as it sets up its route (its reason then ends in
// "over tcp" or "over ibverbs"): the agent sets the far set up if it has
// none, as a post would (same checks, same per-process budget), within
// 3 s and the process's life, and answers its route 0's backend, or
// unknown when that fails; at most 4 of a process's asks are worked on at
// once (more are answered unknown at once), and an answer the process's
// full socket does not take is dropped (never waited for).
//
// A far agent whose host leaves the cluster (its etcd membership record
// goes: membership.Follow calls the manager's DropPeer, as a serve
// --etcd daemon does) has the routes to it ended: they are the
// manager's own routes, so DropPeer fails them all with ErrPeerGone, the
// operations in flight through them are answered PEER_GONE, and the next
// post sets up a new route (which fails PEER_GONE while the host is away).
//
// A process that goes (its socket or its shm route ends) loses its slot at
// once (frames for it are answered ErrPeerGone), its operations are
// cancelled with ErrPeerGone, and its proxies released. Close sends every
// process gone, then ends them as above, and waits.
//
// # What is trusted
//
// Checked by the kernel: an attaching process's pid and uid (SO_PEERCRED;
// the uid must be one the agent serves). Checked against capabilities:
// every byte of memory, the process's own and any far process's, is
// reached only through a key its owner's code checks (mapping, access,
// lease, revocation). Taken on the deployment's secret alone (whoever
// holds it can claim them):
//   - the manager id a process gives at attach: it is the Origin of its
//     posts, which far processes' events and messages name as their Peer;
//   - the agent bit of a TCP route handshake (initiator's): frames on
//     such a route may name an Origin, which this agent's processes see
//     as the Peer of the events and messages;
//   - the agent bit of a route answer (responder's): the far end is taken
//     for an agent and sent posts (their Via, keys and bytes, all of
//     which the posting process chose to send there).
//
// So a holder of the secret can make an event or a message reaching a
// process through an agent name any manager as its sender (a Send needs
// no key; a PutWithImm needs the target region's key), though it can do
// nothing to memory it has no key for, and a direct peer's Peer is a
// claim as well (route handshakes carry the manager id the initiator
// gives). Mutual TLS (--data-tls) authenticates every data connection
// under the deployment's CA, but neither bit nor the Origin is bound to
// the certificate's identity: a peer with any certificate of the CA and
// the secret may claim to be an agent. An Origin is not a proof of who
// sent; a process that needs one authenticates its messages itself.
//
// Linux only: elsewhere New fails with rdmamgr.ErrNotSupported.
package hostagent
