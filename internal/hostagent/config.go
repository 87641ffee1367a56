package hostagent

import (
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
)

// DefaultRoutes is the number of data connections between two agents
// (the TCP backend's ConnsPerRoute in agent mode), as rv's default.
const DefaultRoutes = 4

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
	// and namespaces). Tests give two agents of one host different ones.
	HostID [HostIDSize]byte
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}
