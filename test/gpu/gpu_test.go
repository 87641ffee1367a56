package gpu

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/node"
)

// driverOrSkip opens the real driver and checks device 0 is there, or
// skips the test saying why.
func driverOrSkip(t *testing.T) {
	t.Helper()
	d, err := cuda.Open()
	if err != nil {
		t.Skipf("no CUDA driver here (%v): the GPU checks need one", err)
	}
	defer d.Close()
	if n, err := d.DeviceCount(); err != nil || n == 0 {
		t.Skipf("CUDA driver without a device (%d devices, %v)", n, err)
	}
}

// rdmamgrBinary is RDMAMGR_BIN, or a fresh build where Go is installed.
func rdmamgrBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RDMAMGR_BIN"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "rdmamgr")
	if err := proc.Build("github.com/rdmamgr/rdmamgr/cmd/rdmamgr", bin); err != nil {
		t.Skipf("no RDMAMGR_BIN and no build: %v", err)
	}
	return bin
}

// TestGPUAcrossProcesses: a daemon serving GPU buffers (serve --cuda) and
// this process (a node with the driver), over shm and over TCP. Every
// direction between host and device memory on either side, bytes checked
// through host buffers only (the public API has no host view of device
// memory): host → peer GPU (Put), peer GPU → my GPU (Get), my GPU → peer
// host (Put), peer host → my host (Get), compared with what was sent.
func TestGPUAcrossProcesses(t *testing.T) {
	driverOrSkip(t)
	bin := rdmamgrBinary(t)
	for _, kind := range []string{"shm", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			d, err := proc.Start(ctx, proc.Spec{Name: "daemon", Path: bin, Stderr: os.Stderr,
				Args: []string{"serve", "--cuda", "--backend", kind, "--listen", "127.0.0.1:0", "--log-level", "warn"}})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Stop(5 * time.Second)
			k, err := node.ParseBackend(kind)
			if err != nil {
				t.Fatal(err)
			}
			n, err := node.Start(ctx, node.Config{Listen: "127.0.0.1:0", Backend: k, CUDA: node.CUDAConfig{Open: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			for _, size := range []uint64{4096, 1<<20 + 17, 64 << 20} {
				moveAll(t, ctx, n, d.Addr, size)
			}
		})
	}
}

func moveAll(t *testing.T, ctx context.Context, n *node.Node, peerAddr string, size uint64) {
	t.Helper()
	me, peer := n.Client(), n.ClientOf(peerAddr, "")
	rw := buffer.AccessReadWrite
	gpu := actor.WithDevice(buffer.CUDA(0))
	req := func(c *actor.Client, opts ...actor.BufferOption) buffer.Buffer {
		t.Helper()
		b, err := c.RequestBuffer(ctx, size, rw, opts...)
		if err != nil {
			t.Fatalf("%d bytes: request buffer: %v", size, err)
		}
		t.Cleanup(func() { _ = c.ReleaseBuffer(context.Background(), b) })
		return b
	}
	src, back := req(me), req(me)
	myGPU, peerGPU, peerHost := req(me, gpu), req(peer, gpu), req(peer)
	qp, err := me.RequestQueuePair(ctx, peer.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	mem, err := n.Manager().Bytes(src)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = rand.Read(mem)
	steps := []struct {
		what       string
		put        bool
		local, rem buffer.Buffer
	}{
		{"host → peer GPU", true, src, peerGPU},
		{"peer GPU → my GPU", false, myGPU, peerGPU},
		{"my GPU → peer host", true, myGPU, peerHost},
		{"peer host → my host", false, back, peerHost},
	}
	for _, s := range steps {
		start := time.Now()
		var err error
		if s.put {
			err = qp.Put(ctx, s.local, s.rem).Wait(ctx)
		} else {
			err = qp.Get(ctx, s.local, s.rem).Wait(ctx)
		}
		if err != nil {
			t.Fatalf("%d bytes, %s: %v", size, s.what, err)
		}
		t.Logf("%d bytes, %s: %v", size, s.what, time.Since(start))
	}
	got, err := n.Manager().Bytes(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, mem) {
		t.Fatalf("%d bytes: what came back through both GPUs differs from what was sent", size)
	}
}
