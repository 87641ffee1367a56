package ibverbs

import (
	"testing"
	"time"
)

func TestConfigVerify(t *testing.T) {
	if err := DefaultConfig().Verify(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := (Config{}).Verify(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	if d := (Config{}).withDefaults(); d.MaxInFlight != 128 || d.CQSize != 8192 || d.GIDIndex != 0 ||
		d.RecvSlots != 16 || d.MaxSend != 4096 || d.DisableAtomics {
		t.Errorf("zero config with defaults: %+v", d)
	}
	for _, c := range []Config{
		{Port: -1}, {Port: 256}, {GIDIndex: -2}, {MaxInFlight: -1}, {MaxInFlight: 1 << 17},
		{MaxInFlight: 256, CQSize: 128}, {MaxMessage: -1}, {MaxRoutes: -1}, {WatchdogInterval: -time.Second},
		{AckTimeout: 32}, {AckTimeout: -1}, {RetryCount: 8}, {DrainTimeout: -1},
		{RecvSlots: -1}, {RecvSlots: maxRecvSlots + 1}, {MaxSend: -1}, {MaxSend: maxSendLimit + 1},
	} {
		if err := c.Verify(); err == nil {
			t.Errorf("Verify(%+v) accepted", c)
		}
	}
}
