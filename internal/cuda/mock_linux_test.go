//go:build linux && cgo

package cuda_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// TestMockDriver runs the real driver's cgo path (dlopen, dlsym, the C
// helpers) against testdata/mockcuda.c built as libcuda.so.1, in a child
// test process whose LD_LIBRARY_PATH finds it (the loader reads it at
// start). It proves the plumbing, not CUDA: TestOpen does that on a GPU.
func TestMockDriver(t *testing.T) {
	switch os.Getenv("RDMAMGR_CUDA_MOCK") {
	case "round-trip":
		mockRoundTrip(t)
		return
	case "no-device":
		_, err := cuda.Open()
		if !errors.Is(err, rdmamgr.ErrNotSupported) || !errors.Is(err, cuda.ErrNoDevice) || !strings.Contains(err.Error(), "no CUDA device") {
			t.Fatalf("Open with no device: %v", err)
		}
		return
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the mock libcuda.so.1", cc)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.1")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, "testdata/mockcuda.c").CombinedOutput(); err != nil {
		t.Fatalf("building the mock: %v\n%s", err, out)
	}
	for _, mode := range []string{"round-trip", "no-device"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMockDriver$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "RDMAMGR_CUDA_MOCK="+mode, "LD_LIBRARY_PATH="+dir)
		if mode == "no-device" {
			cmd.Env = append(cmd.Env, "MOCK_CUDA_NO_DEVICE=1")
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestMockDriver") {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
	}
}

func mockRoundTrip(t *testing.T) {
	d, err := cuda.Open()
	if err != nil {
		t.Fatalf("Open with the mock libcuda.so.1: %v", err)
	}
	defer d.Close()
	roundTrip(t, d) // symbols, argument order, context current, flags
	ctx, err := d.PrimaryContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.ReleasePrimaryContext(0)
	if v, err := d.DeviceAttribute(0, cuda.AttrDmaBufSupported); err != nil || v != 1240 {
		t.Fatalf("DeviceAttribute = %d, %v; want 1240 (the mock echoes attr*10)", v, err)
	}
	if _, err := d.DeviceAttribute(1, cuda.AttrDmaBufSupported); !errors.Is(err, cuda.ErrNoDevice) {
		t.Fatalf("DeviceAttribute of device 1: %v", err)
	}
	p, err := d.MemAlloc(ctx, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(ctx, p)
	h, err := d.IPCGetMemHandle(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := d.IPCOpenMemHandle(ctx, h); err != nil || q != p {
		t.Fatalf("IPCOpenMemHandle = %#x, %v; want %#x (the handle's 64 bytes went through)", q, err, p)
	}
	if err := d.IPCCloseMemHandle(ctx, p); err != nil {
		t.Fatal(err)
	}
	if base, size, err := d.MemAddressRange(ctx, p); err != nil || base != p || size != 4096 {
		t.Fatalf("MemAddressRange = %#x, %d, %v; want %#x, 4096 (the mock's answer)", base, size, err, p)
	}
	if fd, err := d.DmaBufFD(ctx, p, 4096); fd != -1 || !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("DmaBufFD = %d, %v; want -1 and ErrNotSupported", fd, err)
	}
	if err := d.StreamDestroy(ctx, cuda.Stream(8)); !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Fatalf("StreamDestroy of a bad stream: %v", err)
	}
	host := make([]byte, 64)
	if err := d.HostRegister(ctx, host); err != nil {
		t.Fatal(err)
	}
	if err := d.HostUnregister(ctx, host); err != nil {
		t.Fatal(err)
	}
}
