package actor

import "testing"

// One remote peer never holds every region by default: the per-peer cap
// is at most half the registry's regions, however few it has (a low
// open-file limit gives few), and a cap set explicitly is kept.
func TestRemoteBuffersPerPeerDefault(t *testing.T) {
	for _, tc := range []struct {
		regions, perPeer, want int
	}{
		{16384, 0, 1024},
		{2048, 0, 1024},
		{512, 0, 256},
		{100, 0, 50},
		{1, 0, 1},
		{100, 300, 300},
		{16384, 10, 10},
	} {
		c := Config{MaxRemoteBuffersPerPeer: tc.perPeer}
		c.Limits.MaxRegions = tc.regions
		if got := c.withDefaults().MaxRemoteBuffersPerPeer; got != tc.want {
			t.Errorf("%d regions, per peer set to %d: cap %d, want %d", tc.regions, tc.perPeer, got, tc.want)
		}
	}
	d := DefaultConfig()
	if d.MaxRemoteBuffersPerPeer > max(d.Limits.MaxRegions/2, 1) {
		t.Errorf("DefaultConfig: %d buffers per peer of %d regions", d.MaxRemoteBuffersPerPeer, d.Limits.MaxRegions)
	}
}
