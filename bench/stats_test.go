package bench

import (
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	lat := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]time.Duration{0: 1, 50: 5, 99: 9, 100: 10} {
		if got := Percentile(lat, p); got != want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", p, got, want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
	if got := MiBPerSec(3<<20, 2*time.Second); got != 1.5 {
		t.Errorf("MiBPerSec = %v, want 1.5", got)
	}
	if got := PerSec(10, 4*time.Second); got != 2.5 {
		t.Errorf("PerSec = %v, want 2.5", got)
	}
	if MiBPerSec(1, 0) != 0 || PerSec(1, 0) != 0 {
		t.Error("a rate over no time is not 0")
	}
	if got := Micros(1500 * time.Nanosecond); got != 1.5 {
		t.Errorf("Micros = %v, want 1.5", got)
	}
}
