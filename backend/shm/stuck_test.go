//go:build linux

package shm_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// initiatorEnv makes TestHelperInitiator an initiator process: it reads
// the owner's answer and a region (hex answer, id, hex key, length: one
// line) and puts into the region until its route fails.
const initiatorEnv = "RDMAMGR_SHM_TEST_INITIATOR"

const stuckSize = 64 << 20

// TestHelperInitiator is the initiator process of TestStuckPeerStopped;
// it skips when run as a test.
func TestHelperInitiator(t *testing.T) {
	if os.Getenv(initiatorEnv) == "" {
		t.Skip("the initiator process of TestStuckPeerStopped")
	}
	reg := memreg.NewRegistry(0xA11, buffer.Limits{})
	b, err := shm.New(shm.Config{}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pending, info, err := b.PrepareRoute(ctx, backendtest.OwnerB)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%x\n", info)
	var ansHex, keyHex string
	var region, n uint64
	if _, err := fmt.Fscanf(bufio.NewReader(os.Stdin), "%s %d %s %d\n", &ansHex, &region, &keyHex, &n); err != nil {
		t.Fatal(err)
	}
	ans, _ := hex.DecodeString(ansHex)
	var remote buffer.Buffer
	remote.OwnerID, remote.Region, remote.Length, remote.Access = backendtest.OwnerB, region, n, buffer.AccessReadWrite
	k, _ := hex.DecodeString(keyHex)
	copy(remote.Key[:], k)
	rt, err := pending.Complete(ctx, ans)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	local, err := reg.Allocate(n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("copying")
	for backendtest.Do(t, timeout, rt, reg, backend.OpWrite, local, remote) == nil {
	}
}

// TestStuckPeerStopped (issue 24, row 5): a peer stopped (SIGSTOP) in
// the middle of a copy into a region holds neither Revoke nor Release of
// it past the bound (2 s): both return nil, the stopped peer's route is
// ended, and the owner goes on serving. Before, each waited for the
// count in flight the stopped peer never lowers: until its context ended.
func TestStuckPeerStopped(t *testing.T) {
	p := newPair(t, shm.Config{})
	cmd, stdin, lines := startInitiator(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ans, err := p.b.AcceptRoute(ctx, backendtest.OwnerA, mustHex(t, <-lines))
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.regB.Allocate(stuckSize, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(stdin, "%x %d %x %d\n", ans, h.Region, h.Key[:], h.Length)
	if l := <-lines; l != "copying" {
		t.Fatalf("initiator: %q", l)
	}
	stopMidCopy(t, cmd, p.b)

	for _, tc := range []struct {
		name string
		end  func(context.Context, buffer.Buffer) error
	}{{"revoke", p.regB.Revoke}, {"release", p.regB.Release}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t0 := time.Now()
		err := tc.end(ctx, h)
		cancel()
		if err != nil {
			t.Fatalf("%s with the peer stopped mid-copy: %v", tc.name, err)
		}
		t.Logf("%s returned after %v with the peer stopped mid-copy", tc.name, time.Since(t0).Round(time.Millisecond))
	}
	checkServes(t, p)
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return b
}

// startInitiator runs TestHelperInitiator in a process of its own, killed
// when the test ends; it returns its stdin and its lines of output.
func startInitiator(t *testing.T) (*exec.Cmd, *os.File, <-chan string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperInitiator$", "-test.count=1")
	cmd.Env = append(os.Environ(), initiatorEnv+"=1")
	cmd.Stderr = os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		w.Close()
	})
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			if l := strings.TrimSpace(s.Text()); l != "" && !strings.HasPrefix(l, "=== ") {
				lines <- l
			}
		}
	}()
	return cmd, w, lines
}

// stopMidCopy stops the initiator (SIGSTOP) at a moment its count of
// copies in flight at b is up, trying again (SIGCONT) until it is.
func stopMidCopy(t *testing.T, cmd *exec.Cmd, b *shm.Backend) {
	t.Helper()
	for i := 0; ; i++ {
		if b.InFlight() > 0 {
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // stopped by now
			if b.InFlight() > 0 {
				t.Logf("peer stopped mid-copy (attempt %d)", i+1)
				return
			}
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		if i > 10000 {
			t.Fatal("never caught the peer mid-copy")
		}
		time.Sleep(time.Millisecond)
	}
}
