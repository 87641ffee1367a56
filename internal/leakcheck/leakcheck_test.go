package leakcheck

import (
	"strings"
	"testing"
)

func parked(stop <-chan struct{}) { <-stop }

// Growth names the group that grew, with its counts and a stack.
func TestGrowth(t *testing.T) {
	before := Take()
	if before.Total() < 1 {
		t.Fatalf("Take found %d goroutines", before.Total())
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	for range 3 {
		go func() { defer func() { done <- struct{}{} }(); parked(stop) }()
	}
	defer func() {
		close(stop)
		for range 3 {
			<-done
		}
	}()
	var after *Snapshot
	for range 1000 { // until all three are parked
		after = Take()
		if strings.Contains(after.Growth(before), "0 -> 3: ") {
			break
		}
	}
	g := after.Growth(before)
	if after.Total() < before.Total()+3 || !strings.Contains(g, "0 -> 3: ") || !strings.Contains(g, "leakcheck.parked") {
		t.Fatalf("%d -> %d goroutines; growth:\n%s", before.Total(), after.Total(), g)
	}
	if s := before.Growth(before); s != "" {
		t.Errorf("a snapshot grew against itself:\n%s", s)
	}
}
