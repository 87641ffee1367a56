package hostagent

import (
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
)

// DefaultRoutes is the number of data connections between two agents'
// hosts, as rv's default: each agent's route to the other holds half
// (RouteConns).
const DefaultRoutes = 4

// MinRoutes is the fewest data connections between two agents: one route
// each way (a TCP route carries requests one way: its dialer posts, the
// far end serves), of one connection at least.
const MinRoutes = 2

// RouteConns is the number of connections of the route from the agent
// whose manager id is self to the one whose manager id is peer, when two
// agents hold n (>= MinRoutes) between them: half each, and the extra one
// of an odd n to the lower id's route. Once both agents posted to each
// other, the pair of hosts holds exactly n data connections.
func RouteConns(n int, self, peer uint64) int {
	if self < peer {
		return (n + 1) / 2
	}
	return n / 2
}

// HostIDSize is the size of a host id (agentwire.HostIDSize).
const HostIDSize = 32

// Config configures an Agent.
type Config struct {
	// Socket is the attach socket's path (a filesystem unix socket). It
	// must not exist, unless it is a socket no one listens on any more
	// (a stale one is removed).
	Socket string
	// Secret is the deployment's: an attaching process proves it.
	Secret backend.Secret
	// AllowUIDs are the user ids, besides the agent's own, whose
	// processes may attach.
	AllowUIDs []int
	// HostID names the host to processes, which go through their agent
	// only to processes of another host id. Zero: the host's own (boot id
	// and namespaces, and HostName). Tests give two agents of one host
	// different ones.
	HostID [HostIDSize]byte
	// HostName names the host beyond its kernel (node.Config.HostID,
	// --host-id; package hostid): the agent's shm initiator takes it, so
	// only processes of the same name attach (their shm refuses another
	// host), and a zero HostID is derived from it. "": the kernel's host.
	HostName string
	// Serving are the manager's backends besides TCP whose routes reach
	// far agents (node gives its ibverbs backend): each serves frames for
	// our processes through our resolver too (wiring.SetResolver); one
	// that takes none fails Start with ErrNotSupported.
	Serving []backend.Backend
	// Routes is N, the data connections between this agent's host and
	// each other agent's (0: DefaultRoutes; at least MinRoutes): on TCP
	// the manager's TCP backend holds them (node sets its ConnsFor to
	// RouteConns); on ibverbs the agent keeps RouteConns routes to each
	// far agent, one RC queue pair each.
	Routes int
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger

	// spreadTCP makes the agent keep RouteConns routes to a far agent on
	// TCP too, as on ibverbs (tests: with one connection per TCP route
	// they stand in for queue pairs).
	spreadTCP bool
}
