package memreg

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// The benchmarks use only Allocate, Register, Bytes and Release, so the
// same file measures an older registry too (the figures of issue 14).

var benchSizes = []int{4 << 10, 1 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// BenchmarkAllocateRelease is RequestBuffer+ReleaseBuffer at the registry:
// one buffer allocated and released per op, its memory not touched.
func BenchmarkAllocateRelease(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			benchAlloc(b, size, false)
		})
	}
}

// BenchmarkAllocateTouchRelease also writes one byte per page of the
// buffer, as a user filling it does: fresh mappings fault, pooled slots
// do not.
func BenchmarkAllocateTouchRelease(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			benchAlloc(b, size, true)
		})
	}
}

// BenchmarkAllocateReleaseExporting is BenchmarkAllocateRelease and
// BenchmarkAllocateTouchRelease in a registry that exports (the shm
// backend's, SetExporting): a readable buffer has a memfd of its own
// whatever its size.
func BenchmarkAllocateReleaseExporting(b *testing.B) {
	for _, touch := range []bool{false, true} {
		for _, size := range benchSizes {
			name := sizeName(size)
			if touch {
				name += "/touch"
			}
			b.Run(name, func(b *testing.B) {
				benchAllocIn(b, size, touch, true)
			})
		}
	}
}

func benchAlloc(b *testing.B, size int, touch bool) { benchAllocIn(b, size, touch, false) }

func benchAllocIn(b *testing.B, size int, touch, exporting bool) {
	g := NewRegistry(testOwner, buffer.Limits{})
	if exporting {
		g.SetExporting()
	}
	defer g.Close(context.Background())
	page := os.Getpagesize()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h, err := g.Allocate(uint64(size), buffer.AccessReadWrite)
		if err != nil {
			b.Fatal(err)
		}
		if touch {
			mem, _ := g.Bytes(h)
			for i := 0; i < len(mem); i += page {
				mem[i] = 1
			}
		}
		if err := g.Release(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buffers/s")
}

// BenchmarkRegisterSame registers the same []byte again while another
// holder keeps it registered, and releases it: what the registration
// cache serves.
func BenchmarkRegisterSame(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			g := NewRegistry(testOwner, buffer.Limits{})
			defer g.Close(context.Background())
			ctx := context.Background()
			p := make([]byte, size)
			keep, err := g.Register(p, buffer.AccessReadWrite)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				h, err := g.Register(p, buffer.AccessReadWrite)
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Release(ctx, h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buffers/s")
			_ = g.Release(ctx, keep)
		})
	}
}
