package leakcheck

import (
	"strings"
	"testing"
	"time"
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
	const want = "0 -> 3: github.com/rdmamgr/rdmamgr/internal/leakcheck.parked"
	var after *Snapshot
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		after = Take() // until all three are parked
		if strings.Contains(after.Growth(before), want) {
			break
		}
	}
	g := after.Growth(before)
	if after.Total() < before.Total()+3 || !strings.Contains(g, want) {
		t.Fatalf("%d -> %d goroutines; growth:\n%s", before.Total(), after.Total(), g)
	}
	if s := before.Growth(before); s != "" {
		t.Errorf("a snapshot grew against itself:\n%s", s)
	}
}
