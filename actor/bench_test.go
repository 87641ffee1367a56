package actor

import (
	"context"
	"fmt"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/remoteguard"
)

// BenchmarkRequestReleaseBuffer is RequestBuffer+ReleaseBuffer round trips
// through a manager running the TCP backend: from a client in the
// manager's actor system (local) and from another actor system over
// protoactor remote on loopback TCP (remote: a peer's request, with the
// remote caps and lease). The figures of issue 14.
func BenchmarkRequestReleaseBuffer(b *testing.B) {
	for _, where := range []string{"local", "remote"} {
		for _, size := range []uint64{4 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", where, size>>10), func(b *testing.B) {
				c := benchClient(b, where == "remote")
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					h, err := c.RequestBuffer(ctx, size, buffer.AccessReadWrite)
					if err != nil {
						b.Fatal(err)
					}
					if err := c.ReleaseBuffer(ctx, h); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buffers/s")
			})
		}
	}
}

// benchClient starts a manager (closed at cleanup) and returns a client of
// it, in its own actor system or, remote, in another one.
func benchClient(b *testing.B, remote bool) *Client {
	b.Helper()
	sys := NewActorSystem(nil)
	b.Cleanup(sys.Shutdown)
	if !remote {
		return startBenchManager(b, sys).Client()
	}
	r, _, err := remoteguard.Start(sys, "127.0.0.1:0", remoteguard.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { remoteguard.Stop(sys, r) })
	m := startBenchManager(b, sys)
	csys := NewActorSystem(nil)
	b.Cleanup(csys.Shutdown)
	cr, _, err := remoteguard.Start(csys, "127.0.0.1:0", remoteguard.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { remoteguard.Stop(csys, cr) })
	return NewClient(csys, protoactor.NewPID(m.PID().Address, m.PID().Id))
}

func startBenchManager(b *testing.B, sys *protoactor.ActorSystem) *Manager {
	b.Helper()
	m, err := New(sys, Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if err := startTCP(context.Background(), m); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return m
}
