//go:build linux

package agenthosts

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/test/netns"

	"github.com/rdmamgr/rdmamgr/node"
)

// agentBuilt says whether this tree has agent mode (node.Config.Agent and
// `rdmamgr serve --agent-socket`); the agent-mode tests skip without it.
const agentBuilt = false

// withAgent points cfg at the host agent's socket (none: direct mode).
func withAgent(cfg *node.Config, sock string) error {
	_ = cfg
	if sock != "" {
		return errors.New("agent mode is not built in this tree")
	}
	return nil
}

// agentProc is a host's agent: `rdmamgr serve --agent-socket`.
type agentProc struct {
	host *netns.Host
	p    *proc.Proc
	addr string // its actor system
	data string // its TCP data listener
	log  *proc.Buffer
}

// agentSocket is h's agent socket (the hosts share the file system: one
// directory per host).
func (c *cluster) agentSocket(h *netns.Host) string {
	return filepath.Join(c.dir, h.Name, "agent.sock")
}

// startAgent starts h's agent and waits for its ready line.
func (c *cluster) startAgent(h *netns.Host) *agentProc {
	c.t.Helper()
	c.t.Fatal("agent mode is not built in this tree")
	return nil
}

// stats reads the agent's RSS (from /proc) and goroutines.
func (a *agentProc) stats(t *testing.T) *workerStats {
	return &workerStats{RSSKiB: rssKiB(a.p.Pid())}
}
