package agent

import (
	"bytes"
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// FuzzRouteInfo feeds hostile route infos and answers (a far manager's
// bytes, at PrepareRoute's peer and Complete) to their decoders: they
// never panic, and what they accept is a slot, a printable address of at most
// agentwire.MaxAddr bytes (a post's far agent), and encodes back to the same
// bytes.
func FuzzRouteInfo(f *testing.F) {
	i := routeInfo{slot: 7, agent: "10.0.0.1:4000"}
	i.host[0] = 3
	f.Add(i.encode())
	a := routeAnswer{slot: 9, agent: "10.0.0.2:4000/m"}
	f.Add(a.encode())
	f.Add([]byte{infoVersion})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		if i, err := decodeInfo(p); err == nil {
			check(t, i.slot, i.agent)
			if b := i.encode(); !bytes.Equal(b, p) {
				t.Fatalf("info %x re-encodes as %x", p, b)
			}
		}
		if a, err := decodeAnswer(p); err == nil {
			check(t, a.slot, a.agent)
			if b := a.encode(); !bytes.Equal(b, p) {
				t.Fatalf("answer %x re-encodes as %x", p, b)
			}
		}
	})
}

func check(t *testing.T, slot uint16, agent string) {
	t.Helper()
	if slot == 0 || agent == "" || len(agent) > agentwire.MaxAddr || !printable(agent) {
		t.Fatalf("accepted slot %d, agent %q", slot, agent)
	}
}
