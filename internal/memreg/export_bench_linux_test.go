package memreg

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// BenchmarkExportRevoke measures the owner's side of allocating a region
// in a registry that exports, exporting it (Ref.ExportFD: its own memfd,
// sealed) and revoking it (its pages move), without any peer: go test
// -run '^$' -bench ExportRevoke ./internal/memreg.
func BenchmarkExportRevoke(b *testing.B) {
	for _, n := range []int{4096, 65536, 1 << 20} {
		b.Run(sizeName(n), func(b *testing.B) {
			g := NewRegistry(1, buffer.Limits{})
			g.SetExporting()
			defer g.Close(context.Background())
			ctx := context.Background()
			for range b.N {
				h, err := g.Allocate(uint64(n), buffer.AccessReadWrite)
				if err != nil {
					b.Fatal(err)
				}
				ref, err := g.AcquireRemote(h.Region, h.Key, 0, 1, buffer.AccessRead)
				if err != nil {
					b.Fatal(err)
				}
				fd, _, err := ref.ExportFD(g)
				if err != nil {
					b.Fatal(err)
				}
				unix.Close(fd)
				ref.Release()
				if err := g.Revoke(ctx, h); err != nil {
					b.Fatal(err)
				}
				if err := g.Release(ctx, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
