//go:build linux

package shm_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// owner is an owner process and a route to it.
type owner struct {
	cmd    *exec.Cmd
	route  backend.Route
	handle buffer.Buffer // its 16 MiB buffer
}

// startOwner starts an owner process and connects a route from a to it.
func startOwner(t *testing.T, a *shm.Backend) *owner {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ownerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pending, info, err := a.PrepareRoute(ctx, ownerID)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(stdin, "%x\n", info)
	var ansHex, keyHex string
	var region uint64
	if _, err := fmt.Fscanf(bufio.NewReader(stdout), "%s %d %s\n", &ansHex, &region, &keyHex); err != nil {
		t.Fatalf("owner's answer: %v", err)
	}
	ans, _ := hex.DecodeString(ansHex)
	key, _ := hex.DecodeString(keyHex)
	rt, err := pending.Complete(ctx, ans)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	o := &owner{cmd: cmd, route: rt,
		handle: buffer.Buffer{OwnerID: ownerID, Region: region, Length: ownerSize, Access: buffer.AccessReadWrite}}
	copy(o.handle.Key[:], key)
	return o
}

// TestOwnerKilled: the owner dies in the middle of copies: the initiator
// survives (its mapping keeps the memory), reports ErrPeerGone, and a
// restarted owner's memory is unreachable through the old handle.
func TestOwnerKilled(t *testing.T) {
	a, regA := newBackend(t, backendtest.OwnerA, shm.Config{})
	backendtest.CloseAtCleanup(t, timeout, a, regA)
	o := startOwner(t, a)
	const n = 4 << 20
	hl, ll := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	if err := backendtest.Do(t, timeout, o.route, regA, backend.OpRead, hl, slice(o.handle, 0, n)); err != nil {
		t.Fatalf("first get: %v", err)
	}
	if ll[0] != 0x5A || ll[n-1] != 0x5A {
		t.Fatalf("first get read %#x..%#x, want 0x5a", ll[0], ll[n-1])
	}
	var ok, gone int
	killed := false
	for i := 0; i < 100000; i++ {
		if i == 20 {
			if err := o.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
		op := backend.OpWrite
		if i%2 == 0 {
			op = backend.OpRead
		}
		err := backendtest.Do(t, timeout, o.route, regA, op, hl, slice(o.handle, uint64(i%4)*n, n))
		switch {
		case err == nil:
			ok++
		case killed && errors.Is(err, rdmamgr.ErrPeerGone):
			gone++
		default:
			t.Fatalf("op %d (killed %v): %v", i, killed, err)
		}
		if gone > 0 {
			break
		}
	}
	select {
	case <-o.route.Done():
	case <-time.After(timeout):
		t.Fatal("route still up after its owner died")
	}
	if !errors.Is(o.route.Err(), rdmamgr.ErrPeerGone) {
		t.Fatalf("route ended with %v, want ErrPeerGone", o.route.Err())
	}
	t.Logf("%d ops succeeded, then the owner's death was reported", ok)

	o2 := startOwner(t, a)
	old := o.handle
	old.Length = 4096
	h2, _ := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	if err := backendtest.Do(t, timeout, o2.route, regA, backend.OpRead, h2, old); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("get through the dead owner's handle from its successor: %v, want ErrReleased", err)
	}
	if err := backendtest.Do(t, timeout, o2.route, regA, backend.OpRead, h2, slice(o2.handle, 0, 4096)); err != nil {
		t.Fatalf("get from the restarted owner: %v", err)
	}
}

func slice(h buffer.Buffer, off, n uint64) buffer.Buffer {
	h.Offset, h.Length = off, n
	return h
}
