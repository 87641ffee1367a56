//go:build linux

// TestSoak's probes: reaching a daemon through a new queue pair, waiting
// for the test's manager to drop its routes, and counting the process's
// file descriptors.

package test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// reachDaemon checks that the daemon in sl serves a new queue pair: a
// queue pair and a buffer, random bytes put there and got back, then all
// of it released.
func reachDaemon(r *rand.Rand, sl *fixedDaemon, size uint64) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := local.mgr.Client()
	qp, err := c.RequestQueuePair(ctx, sl.pid)
	if err != nil {
		return fmt.Errorf("queue pair: %w", err)
	}
	defer qp.Release()
	remote, err := local.client(sl.pid).RequestBuffer(ctx, size, buffer.AccessReadWrite)
	if err != nil {
		return fmt.Errorf("buffer: %w", err)
	}
	defer func() {
		if rerr := local.client(sl.pid).ReleaseBuffer(ctx, remote); rerr != nil && err == nil {
			err = fmt.Errorf("release buffer: %w", rerr)
		}
	}()
	var bufs [2]buffer.Buffer
	var mems [2][]byte
	for i := range bufs {
		if bufs[i], err = c.RequestBuffer(ctx, size, buffer.AccessReadWrite); err != nil {
			return fmt.Errorf("local buffer: %w", err)
		}
		defer func() {
			if rerr := local.mgr.Client().ReleaseBuffer(ctx, bufs[i]); rerr != nil && err == nil {
				err = fmt.Errorf("release local buffer: %w", rerr)
			}
		}()
		if mems[i], err = local.mgr.Bytes(bufs[i]); err != nil {
			return err
		}
	}
	fill(r, mems[0])
	soakPoison(mems[1], mems[0])
	if err := wait(qp.Put(ctx, bufs[0], remote)); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if err := wait(qp.Get(ctx, bufs[1], remote)); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if !bytes.Equal(mems[1], mems[0]) {
		return fmt.Errorf("round trip: %s", firstDiff(mems[1], mems[0]))
	}
	return nil
}

// waitNoRoutes waits until the test's manager holds no route.
func waitNoRoutes(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := local.mgr.Client().Status(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("status of the test's manager: %w", err)
		}
		if len(st.Routes) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the test's manager still holds %d routes: %v", len(st.Routes), st.Routes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countFDs counts the process's open file descriptors.
func countFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("list file descriptors: %v", err)
	}
	return len(es) - 1 // without ReadDir's own
}

// fdSummary lists what the process's file descriptors point to.
func fdSummary() string {
	es, _ := os.ReadDir("/proc/self/fd")
	counts := make(map[string]int)
	for _, e := range es {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		if i := strings.Index(l, ":["); i > 0 {
			l = l[:i] // socket:[123] -> socket
		}
		counts[l]++
	}
	var lines []string
	for l, n := range counts {
		lines = append(lines, fmt.Sprintf("  %4d %s", n, l))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
