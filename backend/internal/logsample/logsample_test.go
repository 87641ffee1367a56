package logsample

import "testing"

// The first line passes, the next ones within the second are counted, and
// the next line let through reports them.
func TestSampler(t *testing.T) {
	var s Sampler
	if ok, n := s.Allow(); !ok || n != 0 {
		t.Fatalf("first: %v %d", ok, n)
	}
	for range 3 {
		if ok, _ := s.Allow(); ok {
			t.Fatal("a second line within the second passed")
		}
	}
	s.next.Store(0) // the second is over
	if ok, n := s.Allow(); !ok || n != 3 {
		t.Fatalf("after the second: %v %d, want true 3", ok, n)
	}
}
