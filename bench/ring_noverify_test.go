package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// TestRingNoVerify: the ring's common case (no Verify: reapRing) counts every
// operation once and records one latency for each, for counts that are
// not a multiple of the in-flight depth (the last tickets).
func TestRingNoVerify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := twoNodes(t, ctx, backend.KindSHM)
	peer := a.ClientOf(b.Addr(), "")
	for _, count := range []int64{1, 15, 301, 1000} {
		for _, op := range []string{"put", "get"} {
			cfg := Config{Op: op, Size: 8, Count: int(count), Concurrency: 16, Ring: true, Warmup: 7}
			res, err := Run(ctx, a.Manager(), peer, cfg)
			if err != nil {
				if errors.Is(err, rdmamgr.ErrNotSupported) {
					t.Skip(err)
				}
				t.Fatalf("%s %d: %v", op, count, err)
			}
			if res.Stop != nil || res.Ops != uint64(count) || res.Errs != 0 || int64(len(res.Lat)) != count {
				t.Errorf("%s %d: ops %d, errs %d, %d latencies, stop %v", op, count, res.Ops, res.Errs, len(res.Lat), res.Stop)
			}
			for i, l := range res.Lat {
				if l <= 0 {
					t.Fatalf("%s %d: latency %d is %v", op, count, i, l)
				}
			}
		}
	}
}
