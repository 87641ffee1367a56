//go:build ibverbs

package ibverbs

// Two-process tests: the test binary re-executes itself as a child process
// (childEnv set) that runs a second backend on the same device. Route info
// and buffer handles travel over the child's stdin/stdout as JSON lines.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

const (
	childEnv     = "RDMAMGR_IBV_CHILD"      // the child's owner id
	childSizeEnv = "RDMAMGR_IBV_CHILD_SIZE" // bytes of the child's buffer
)

// childMsg is one line either way.
type childMsg struct {
	Cmd  string         `json:"cmd,omitempty"`  // accept, sum, exit
	Peer uint64         `json:"peer,omitempty"` // accept: the initiator's owner id
	Info string         `json:"info,omitempty"` // hex route info
	Buf  *buffer.Buffer `json:"buf,omitempty"`  // the child's buffer (first line)
	Sum  string         `json:"sum,omitempty"`  // hex sha256 of the child's buffer
	Err  string         `json:"err,omitempty"`
}

// childMain is the child process: one backend, one random-filled buffer.
func childMain() int {
	owner, _ := strconv.ParseUint(os.Getenv(childEnv), 10, 64)
	size, _ := strconv.Atoi(os.Getenv(childSizeEnv))
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		out.Encode(childMsg{Err: err.Error()})
		return 1
	}
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	be, err := newIBVerbs(DefaultConfig(), reg, testLogger())
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	if err := be.Start(ctx); err != nil {
		return fail(err)
	}
	h, err := reg.Allocate(uint64(size), buffer.AccessReadWrite)
	if err != nil {
		return fail(err)
	}
	mem, err := reg.Bytes(h)
	if err != nil {
		return fail(err)
	}
	rand.Read(mem)
	sum := func() string { s := sha256.Sum256(mem); return hex.EncodeToString(s[:]) }
	out.Encode(childMsg{Buf: &h, Sum: sum()})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	for in.Scan() {
		var m childMsg
		if err := json.Unmarshal(in.Bytes(), &m); err != nil {
			return fail(err)
		}
		switch m.Cmd {
		case "accept":
			info, err := hex.DecodeString(m.Info)
			if err == nil {
				info, err = be.AcceptRoute(ctx, m.Peer, info)
			}
			if err != nil {
				out.Encode(childMsg{Err: err.Error()})
				continue
			}
			out.Encode(childMsg{Info: hex.EncodeToString(info)})
		case "sum":
			out.Encode(childMsg{Sum: sum()})
		case "exit":
			err := be.Close()
			if err == nil {
				err = reg.Close(ctx)
			}
			if err != nil {
				return fail(err)
			}
			out.Encode(childMsg{})
			return 0
		default:
			out.Encode(childMsg{Err: "unknown command " + m.Cmd})
		}
	}
	return 2 // stdin closed without exit
}

// child is the parent's handle on a child process.
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    *json.Encoder
	lines chan childMsg
	buf   buffer.Buffer
	sum   string
	wait  sync.Once
	err   error
}

func startChild(t *testing.T, owner uint64, size int) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", childEnv, owner), fmt.Sprintf("%s=%d", childSizeEnv, size))
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
	c := &child{t: t, cmd: cmd, in: json.NewEncoder(stdin), lines: make(chan childMsg, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m childMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m.Err = fmt.Sprintf("bad line %q: %v", sc.Text(), err)
			}
			c.lines <- m
		}
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		c.reap()
	})
	first := c.read()
	if first.Err != "" || first.Buf == nil {
		t.Fatalf("child: %+v", first)
	}
	c.buf, c.sum = *first.Buf, first.Sum
	return c
}

func (c *child) reap() error {
	c.wait.Do(func() { c.err = c.cmd.Wait() })
	return c.err
}

func (c *child) read() childMsg {
	c.t.Helper()
	select {
	case m, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("child exited: %v", c.reap())
		}
		return m
	case <-time.After(waitTimeout):
		c.t.Fatal("child did not answer")
		return childMsg{}
	}
}

func (c *child) call(m childMsg) childMsg {
	c.t.Helper()
	if err := c.in.Encode(m); err != nil {
		c.t.Fatalf("to child: %v", err)
	}
	r := c.read()
	if r.Err != "" {
		c.t.Fatalf("child %s: %s", m.Cmd, r.Err)
	}
	return r
}

// connectChild builds a route from a to the child.
func connectChild(t *testing.T, a *Backend, c *child) backend.Route {
	t.Helper()
	ctx := context.Background()
	pending, info, err := a.PrepareRoute(ctx, c.buf.OwnerID)
	if err != nil {
		t.Fatal(err)
	}
	ans := c.call(childMsg{Cmd: "accept", Peer: a.reg.OwnerID(), Info: hex.EncodeToString(info)})
	peerInfo, err := hex.DecodeString(ans.Info)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := pending.Complete(ctx, peerInfo)
	if err != nil {
		pending.Abort()
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func sumHex(p []byte) string { s := sha256.Sum256(p); return hex.EncodeToString(s[:]) }

// verifiedExchange gets the child's buffer and checks it against the
// child's checksum, then puts fresh bytes and has the child check them.
func verifiedExchange(t *testing.T, rt backend.Route, regA *memreg.Registry, c *child) {
	t.Helper()
	n := int(c.buf.Length)
	ha, la := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	defer regA.Release(context.Background(), ha)
	want := c.call(childMsg{Cmd: "sum"}).Sum
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpRead, ha, c.buf); err != nil {
		t.Fatalf("get from the child: %v", err)
	}
	if got := sumHex(la); got != want {
		t.Fatalf("got the child's %d bytes with sha256 %s, child has %s", n, got, want)
	}
	// Puts of 16 slices in flight at once, then the child's checksum.
	backendtest.Random(t, la)
	const parts = 16
	rec := backendtest.NewRecorder(parts)
	step := n / parts
	for i := range parts {
		end := (i + 1) * step
		if i == parts-1 {
			end = n
		}
		wr, release := backendtest.NewWR(t, regA, backend.OpWrite, backendtest.Slice(t, ha, i*step, end-i*step),
			backendtest.Slice(t, c.buf, i*step, end-i*step), time.Now().Add(waitTimeout), rec)
		defer release()
		if err := rt.Post(wr); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	for range parts {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("put to the child: %v", res.Err)
		}
	}
	if got, want := c.call(childMsg{Cmd: "sum"}).Sum, sumHex(la); got != want {
		t.Fatalf("child has sha256 %s after the puts, want %s", got, want)
	}
}

// TestTwoProcesses moves verified bytes between two processes' backends on
// one device.
func TestTwoProcesses(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 0xA)
	c := startChild(t, 0xB, 4<<20+5)
	rt := connectChild(t, a, c)
	verifiedExchange(t, rt, regA, c)
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	c.call(childMsg{Cmd: "exit"})
	if err := c.reap(); err != nil {
		t.Fatalf("child exit: %v", err)
	}
}

// TestPeerKilled kills the child in the middle of a stream of transfers:
// the work in flight fails with rdmamgr.ErrPeerGone (or ErrDeadline), none
// hangs, the route is marked failed, and a new route to a new peer works.
func TestPeerKilled(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 0xA)
	const size = 8 << 20
	c := startChild(t, 0xB, size)
	rt := connectChild(t, a, c)
	const part = 1 << 20
	ha, _ := backendtest.Alloc(t, regA, size, buffer.AccessReadWrite)

	deadline := 30 * time.Second
	rec := backendtest.NewRecorder(1024)
	var posted, done int
	var errs []error
	var killedAt time.Time
	posting := true
	for {
		// Keep 8 MiB in flight until the first failure after the kill.
		for posting && posted-done < size/part {
			i := posted % (size / part)
			op := backend.OpWrite
			if posted%2 == 1 {
				op = backend.OpRead
			}
			wr, release := backendtest.NewWR(t, regA, op, backendtest.Slice(t, ha, i*part, part),
				backendtest.Slice(t, c.buf, i*part, part), time.Now().Add(deadline), rec)
			defer release()
			if err := rt.Post(wr); err != nil {
				if killedAt.IsZero() {
					t.Fatalf("post before the kill: %v", err)
				}
				errs = append(errs, fmt.Errorf("post: %w", err))
				posting = false
				break
			}
			posted++
		}
		if killedAt.IsZero() && done >= 8 {
			if err := c.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killedAt = time.Now()
			t.Logf("killed the peer after %d transfers completed, %d in flight", done, posted-done)
		}
		if done == posted {
			break
		}
		res := rec.Wait(t, deadline+30*time.Second)
		done++
		if res.Err != nil {
			if killedAt.IsZero() {
				t.Fatalf("transfer failed before the kill: %v", res.Err)
			}
			errs = append(errs, res.Err)
			posting = false
		}
		if posting && !killedAt.IsZero() && time.Since(killedAt) > 2*deadline {
			t.Fatalf("transfers still succeed %v after the kill", time.Since(killedAt))
		}
	}
	if killedAt.IsZero() || len(errs) == 0 {
		t.Fatalf("no failure after the kill (%d posted, %d done)", posted, done)
	}
	t.Logf("%d transfers done, %d failed, the last %v after the kill; first error: %v", done, len(errs), time.Since(killedAt), errs[0])
	kinds := map[string]int{}
	for _, err := range errs {
		switch {
		case errors.Is(err, rdmamgr.ErrPeerGone):
			kinds["peer gone"]++
		case errors.Is(err, rdmamgr.ErrDeadline):
			kinds["deadline"]++
		default:
			t.Errorf("transfer failed with %v, want rdmamgr.ErrPeerGone or ErrDeadline", err)
		}
	}
	t.Logf("failures: %v", kinds)
	select {
	case <-rt.Done():
	default:
		t.Fatal("route not failed after the peer died")
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}

	// A new peer, a new route.
	c2 := startChild(t, 0xC, 1<<20)
	rt2 := connectChild(t, a, c2)
	verifiedExchange(t, rt2, regA, c2)
	c2.call(childMsg{Cmd: "exit"})
	if err := c2.reap(); err != nil {
		t.Fatalf("second child exit: %v", err)
	}
}
