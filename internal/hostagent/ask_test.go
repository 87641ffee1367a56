//go:build linux

package hostagent

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// askOf sends an ask for far and returns the agent's answer.
func (f *fakeProc) askOf(t *testing.T, id uint32, far string) agentwire.Answer {
	t.Helper()
	pkt, err := (&agentwire.Ask{ID: id, Far: far}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := agentwire.WritePacket(f.c, pkt); err != nil {
		t.Fatal(err)
	}
	f.c.SetReadDeadline(time.Now().Add(testTimeout))
	defer f.c.SetReadDeadline(time.Time{})
	buf := make([]byte, agentwire.MaxPacket)
	if pkt, err = agentwire.ReadPacket(f.c, buf); err != nil {
		t.Fatal(err)
	}
	ans, err := agentwire.DecodeAnswer(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if ans.ID != id {
		t.Fatalf("answer to ask %d, want %d", ans.ID, id)
	}
	return ans
}

// An ask sets the agent's route set to the far agent up and answers its
// backend (TCP between these agents); one for an address where no agent
// answers is answered unknown, and the process stays attached.
func TestAskBackend(t *testing.T) {
	a, b, p1, _ := pairOfAgents(t)
	if ans := p1.askOf(t, 7, b.Addr()); ans.Backend != agentwire.AnswerTCP {
		t.Fatalf("ask for agent B: backend %d, want tcp", ans.Backend)
	}
	a.mu.Lock()
	far := len(a.far)
	a.mu.Unlock()
	if far != 1 {
		t.Fatalf("agent A holds %d route sets after the ask, want 1", far)
	}
	if ans := p1.askOf(t, 8, "127.0.0.1:1/nobody"); ans.Backend != agentwire.AnswerUnknown {
		t.Fatalf("ask for no agent: backend %d, want unknown", ans.Backend)
	}
	if ans := p1.askOf(t, 9, b.Addr()); ans.Backend != agentwire.AnswerTCP {
		t.Fatalf("ask again: backend %d, want tcp", ans.Backend)
	}
}
