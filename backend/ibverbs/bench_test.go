//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// BenchmarkRegistration measures registration with the device (Soft-RoCE
// in the VM: test/softroce/ci.sh -test.bench=BenchmarkRegistration):
// Allocate+Release of one buffer per op, and Register+Release of the same
// []byte while another holder keeps it registered. It uses only the
// registry's API, so the same file measures an older registry too.
func BenchmarkRegistration(b *testing.B) {
	requireDevices(b)
	ctx := context.Background()
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("allocate/%dKiB", size>>10), func(b *testing.B) {
			be, reg := newStarted(b, DefaultConfig(), 1)
			defer reg.Close(ctx)
			defer be.Close()
			for b.Loop() {
				h, err := reg.Allocate(uint64(size), buffer.AccessReadWrite)
				if err != nil {
					b.Fatal(err)
				}
				if err := reg.Release(ctx, h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buffers/s")
		})
		b.Run(fmt.Sprintf("register-same/%dKiB", size>>10), func(b *testing.B) {
			be, reg := newStarted(b, DefaultConfig(), 1)
			defer reg.Close(ctx)
			defer be.Close()
			p := make([]byte, size)
			if _, err := reg.Register(p, buffer.AccessReadWrite); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				h, err := reg.Register(p, buffer.AccessReadWrite)
				if err != nil {
					b.Fatal(err)
				}
				if err := reg.Release(ctx, h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buffers/s")
		})
	}
}
