package agent

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// infoVersion is the version of the route info and answer.
const infoVersion = 2

// routeInfo is the initiator's endpoint info (PrepareRoute): where its
// agent is, and which host that is.
type routeInfo struct {
	host  [agentwire.HostIDSize]byte
	slot  uint16
	agent string
}

// routeAnswer is the responder's (AcceptRoute): the initiator's agent
// reaches the responder at (agent, slot), slot being one of the agent
// manager agentID's (random per agent start: a restarted agent at the
// same address hands its slots out afresh; version 2 added it).
type routeAnswer struct {
	slot    uint16
	agent   string
	agentID uint64
}

func (i *routeInfo) encode() []byte {
	b := []byte{infoVersion}
	b = append(b, i.host[:]...)
	b = binary.LittleEndian.AppendUint16(b, i.slot)
	b = append(b, byte(len(i.agent)))
	return append(b, i.agent...)
}

func (a *routeAnswer) encode() []byte {
	b := []byte{infoVersion}
	b = binary.LittleEndian.AppendUint16(b, a.slot)
	b = append(b, byte(len(a.agent)))
	b = append(b, a.agent...)
	return binary.LittleEndian.AppendUint64(b, a.agentID)
}

// reader decodes the info and the answer: every byte is the peer's.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = fmt.Errorf("agent: truncated route info: %w", rdmamgr.ErrProtocol)
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

// head checks the version; slotAgent reads a slot and an agent address.
func (r *reader) head() {
	if v := r.take(1); r.err == nil && v[0] != infoVersion {
		r.err = fmt.Errorf("agent: route info version %d, ours %d: %w", v[0], infoVersion, rdmamgr.ErrVersion)
	}
}

func (r *reader) slotAgent() (uint16, string) {
	var slot uint16
	if p := r.take(2); p != nil {
		slot = binary.LittleEndian.Uint16(p)
	}
	var n int
	if p := r.take(1); p != nil {
		n = int(p[0])
	}
	agent := string(r.take(n))
	if r.err == nil && (slot == 0 || agent == "" || !printable(agent)) {
		r.err = fmt.Errorf("agent: route info with slot %d, agent %q: %w", slot, agent, rdmamgr.ErrProtocol)
	}
	return slot, agent
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("agent: %d trailing bytes in route info: %w", len(r.b), rdmamgr.ErrProtocol)
	}
	return r.err
}

// printable: ASCII without control characters (an actor address).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func decodeInfo(p []byte) (routeInfo, error) {
	var i routeInfo
	r := reader{b: p}
	r.head()
	copy(i.host[:], r.take(agentwire.HostIDSize))
	i.slot, i.agent = r.slotAgent()
	return i, r.end()
}

func decodeAnswer(p []byte) (routeAnswer, error) {
	var a routeAnswer
	r := reader{b: p}
	r.head()
	a.slot, a.agent = r.slotAgent()
	if p := r.take(8); p != nil {
		a.agentID = binary.LittleEndian.Uint64(p)
	}
	if r.err == nil && a.agentID == 0 {
		r.err = fmt.Errorf("agent: route answer without its agent's id: %w", rdmamgr.ErrProtocol)
	}
	return a, r.end()
}
