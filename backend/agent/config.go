package agent

import (
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// Config configures the agent backend of a process. Package node fills
// Secret, ManagerID, Addr and SHM from the node it builds.
type Config struct {
	// Socket is the path of the host agent's attach socket (node.Config.Agent).
	Socket string
	// Retry is how long after a failed attach, or after losing the agent,
	// the next try starts (1 s).
	Retry time.Duration
	// HandshakeTimeout bounds one attach, from dial to welcome (5 s).
	HandshakeTimeout time.Duration
	// MaxInFlight bounds the operations in flight on one route; Post waits
	// for room beyond it (4096).
	MaxInFlight int
	// CloseTimeout bounds how long Route.Close and Backend.Close wait for
	// the agent to answer the operations they cancel (10 s); what is
	// still in flight then completes when the agent answers or goes.
	CloseTimeout time.Duration

	// Secret is the deployment's secret: the attach MAC proves it.
	Secret backend.Secret
	// ManagerID and Addr name the process's manager to the agent.
	ManagerID uint64
	Addr      string
	// SHM is the process's started *shm.Backend: the agent is an shm
	// initiator of the process, and the route it sets up is accepted
	// there (wiring.SHMAcceptAgentRoute).
	SHM any
}

func (c Config) withDefaults() (Config, error) {
	if c.Retry == 0 {
		c.Retry = time.Second
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 4096
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 10 * time.Second
	}
	switch {
	case c.Socket == "":
		return c, fmt.Errorf("agent: no socket path: %w", rdmamgr.ErrInvalid)
	case c.Retry < 0 || c.HandshakeTimeout < 0 || c.MaxInFlight < 0 || c.CloseTimeout < 0:
		return c, fmt.Errorf("agent: negative Retry, HandshakeTimeout, MaxInFlight or CloseTimeout: %w", rdmamgr.ErrInvalid)
	case c.ManagerID == 0 || c.Addr == "":
		return c, fmt.Errorf("agent: no manager id or address: %w", rdmamgr.ErrInvalid)
	case c.SHM == nil:
		return c, fmt.Errorf("agent: needs the process's shm backend: %w", rdmamgr.ErrNotSupported)
	}
	return c, nil
}
