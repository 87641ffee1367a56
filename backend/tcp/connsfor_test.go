package tcp

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// Config.ConnsFor sets the connections of each route we set up, by peer;
// a result outside 1..ConnsPerRoute counts as ConnsPerRoute.
func TestConnsFor(t *testing.T) {
	for _, c := range []struct{ give, want int }{{1, 1}, {3, 3}, {0, 4}, {5, 4}} {
		var asked uint64
		p := newPair(t, Config{ConnsPerRoute: 4, ConnsFor: func(peer uint64) int { asked = peer; return c.give }}, Config{})
		if n := len(p.route.(*route).conns); n != c.want || asked != backendtest.OwnerB {
			t.Fatalf("ConnsFor %d: %d connections (want %d), asked for peer %d (want %d)", c.give, n, c.want, asked, backendtest.OwnerB)
		}
		p.checkServes(t)
	}
}
