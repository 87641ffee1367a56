package cudafake

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// TestDmaBuf: without Config.DmaBuf a device has no dma-buf (attribute 0,
// DmaBufFD fails with ErrNotSupported); with it, DmaBufFD checks the
// range as the driver does and hands out the test's descriptor, counted.
func TestDmaBuf(t *testing.T) {
	w := NewWorld(Config{})
	d := w.Process()
	defer d.Close()
	ctx, _ := d.PrimaryContext(0)
	p, err := d.MemAlloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := d.DeviceAttribute(0, cuda.AttrDmaBufSupported); v != 0 {
		t.Fatalf("dma-buf attribute %d without Config.DmaBuf", v)
	}
	if _, err := d.DmaBufFD(ctx, p, 1<<20); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("DmaBufFD without Config.DmaBuf: %v, want ErrNotSupported", err)
	}

	var asked []uint64
	w = NewWorld(Config{DmaBuf: func(dev int, size uint64) (int, error) {
		asked = append(asked, size)
		return unix.MemfdCreate("fake-dmabuf", unix.MFD_CLOEXEC)
	}})
	d = w.Process()
	defer d.Close()
	ctx, _ = d.PrimaryContext(0)
	if v, _ := d.DeviceAttribute(0, cuda.AttrDmaBufSupported); v != 1 {
		t.Fatalf("dma-buf attribute %d with Config.DmaBuf", v)
	}
	p, _ = d.MemAlloc(ctx, 5000) // page-rounded: 8192
	q, _ := d.MemAlloc(ctx, 4096)
	for _, c := range []struct {
		p    cuda.DevicePtr
		size uint64
		ok   bool
	}{
		{p, 8192, true},
		{p + 4096, 4096, true},
		{p, 12288, false},    // past the allocation
		{p + 1, 4096, false}, // unaligned
		{p, 100, false},      // unaligned size
		{p, 0, false},
		{p + 8192, 4096, false}, // the guard gap
		{q, 4096, true},
		{1, 4096, false},
	} {
		fd, err := d.DmaBufFD(ctx, c.p, c.size)
		if c.ok != (err == nil) {
			t.Fatalf("DmaBufFD(%#x, %d): fd %d, %v; want ok %v", c.p, c.size, fd, err, c.ok)
		}
		if err == nil {
			unix.Close(fd)
		} else if !errors.Is(err, cuda.ErrInvalidValue) {
			t.Fatalf("DmaBufFD(%#x, %d): %v, want ErrInvalidValue", c.p, c.size, err)
		}
	}
	if _, err := d.DmaBufFD(cuda.Context(9), p, 4096); !errors.Is(err, cuda.ErrInvalidContext) {
		t.Fatalf("DmaBufFD in a bad context: %v", err)
	}
	if st := w.Stats(); st.DmaBufExports != 3 || len(asked) != 3 {
		t.Fatalf("%d exports counted, %d asked; want 3", st.DmaBufExports, len(asked))
	}
}
