package cuda_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// TestOpen: without a driver or a device, Open fails with
// rdmamgr.ErrNotSupported naming the reason; with one, a tiny round trip
// host -> device -> device -> host through pinned memory on a stream.
func TestOpen(t *testing.T) {
	d, err := cuda.Open()
	if err != nil {
		if !errors.Is(err, rdmamgr.ErrNotSupported) {
			t.Fatalf("Open: %v, want an error matching ErrNotSupported", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "libcuda.so.1") && !strings.Contains(msg, "no CUDA device") {
			t.Fatalf("Open: %q does not name the reason", msg)
		}
		t.Skipf("no CUDA here: %v", err)
	}
	defer d.Close()
	roundTrip(t, d)
}

func roundTrip(t *testing.T, d cuda.Driver) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, err := d.PrimaryContext(0)
	must(err)
	defer func() { must(d.ReleasePrimaryContext(0)) }()
	const n = 1 << 16
	host, err := d.HostAlloc(ctx, 2*n)
	must(err)
	defer func() { must(d.HostFree(ctx, host)) }()
	src, dst := host[:n], host[n:]
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	a, err := d.MemAlloc(ctx, n)
	must(err)
	defer func() { must(d.MemFree(ctx, a)) }()
	b, err := d.MemAlloc(ctx, n)
	must(err)
	defer func() { must(d.MemFree(ctx, b)) }()
	s, err := d.StreamCreate(ctx)
	must(err)
	defer func() { must(d.StreamDestroy(ctx, s)) }()

	must(d.CopyHtoD(ctx, a, src, s))
	must(d.CopyDtoD(ctx, b, a, n, s))
	must(d.CopyDtoH(ctx, dst, b, s))
	must(d.StreamSynchronize(ctx, s))
	if done, err := d.StreamQuery(ctx, s); !done || err != nil {
		t.Fatalf("StreamQuery after Synchronize = %v, %v", done, err)
	}
	if string(src) != string(dst) {
		t.Fatal("round trip host -> device -> device -> host changed the bytes")
	}
}
