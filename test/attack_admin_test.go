//go:build linux

package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The admin listener (issue 24 rows 9 and 10): at most 64 connections, a
// keep-alive connection idle 30 s is closed; /debug/pprof/ only with
// --pprof; an address beyond loopback is warned about.
const (
	atkAdminMaxConns = 64
	atkAdminIdle     = 30 * time.Second
)

var metricsRE = regexp.MustCompile(`metrics=http://(\S+)/metrics`)

// atkAdminAddr waits for the victim's serving line (it must run at log
// level info) and returns its admin listener's port.
func atkAdminPort(t *testing.T, v *atkVictim) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := metricsRE.FindStringSubmatch(v.d.stderr.String()); m != nil {
			_, port, err := net.SplitHostPort(m[1])
			if err != nil {
				t.Fatalf("admin address %q: %v", m[1], err)
			}
			return port
		}
		if time.Now().After(deadline) {
			t.Fatalf("no serving line with the admin address:\n%s", v.d.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// atkGet GETs path from the admin listener at addr and returns the status.
func atkGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// (g) 900 keep-alive connections to the admin listener, each after one
// request, left idle; a verified bench runs alongside. The victim holds at
// most its cap of them and closes the idle ones; a scrape works after.
func TestAttackAdminIdleConns(t *testing.T) {
	const conns = 900
	v := atkStart(t, 0, "--metrics-listen", "127.0.0.1:0", "--log-level", "info")
	addr := net.JoinHostPort("127.0.0.1", atkAdminPort(t, v))
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	benchDone := make(chan struct{})
	go func() { defer close(benchDone); l.bench(ctx, 1<<30) }()
	defer func() { cancel(); <-benchDone }()

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	refused := 0
	for range conns {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			refused++ // the backlog is full: refused too
			continue
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: victim\r\n\r\n")
		var resp *http.Response
		if err == nil {
			resp, err = http.ReadResponse(bufio.NewReader(c), nil)
		}
		if err != nil {
			refused++
			c.Close()
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held = append(held, c)
	}
	peak := v.peakSample()
	t.Logf("%d keep-alive connections asked: %d held, %d refused; victim's fds %d, baseline %d", conns, len(held), refused, peak.fds, base.fds)
	if len(held) > atkAdminMaxConns {
		t.Errorf("the admin listener holds %d connections, want at most %d", len(held), atkAdminMaxConns)
	}

	// The idle ones are closed by the victim (within its idle timeout;
	// the bound here is a hang guard).
	var wg sync.WaitGroup
	var mu sync.Mutex
	closed := 0
	for _, c := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(3 * atkAdminIdle))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				mu.Lock()
				closed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("idle keep-alive connections closed by the victim: %d of %d", closed, len(held))
	if closed != len(held) {
		t.Errorf("%d of %d idle admin connections still open after %v", len(held)-closed, len(held), 3*atkAdminIdle)
	}
	if code, body := atkGet(t, addr, "/metrics"); code != http.StatusOK || !strings.Contains(body, "rdmamgr_uptime_seconds") {
		t.Errorf("scrape after the attack: %d", code)
	}
	cancel()
	<-benchDone
	after := v.settle(t, base)
	atkNothingGranted(t, v, 1)
	l.report(t, "g admin idle", base, peak, after, time.Since(start))
}

// (h) --metrics-listen 0.0.0.0:0: the victim says loudly that its admin
// listener reaches the network, and serves no pprof there (command line,
// goroutine dumps, heap, profiles) without --pprof. A verified bench runs
// alongside.
func TestAttackAdminBeyondLoopback(t *testing.T) {
	v := atkStart(t, 0, "--metrics-listen", "0.0.0.0:0", "--log-level", "info")
	addr := net.JoinHostPort("127.0.0.1", atkAdminPort(t, v))
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l.bench(ctx, 1<<30)

	if s := v.d.stderr.String(); !strings.Contains(s, "WARNING: --metrics-listen 0.0.0.0:0") {
		t.Errorf("no warning for an admin listener beyond loopback:\n%s", s)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap"} {
		if code, body := atkGet(t, addr, path); code != http.StatusNotFound {
			t.Errorf("GET %s without --pprof: %d (%d bytes), want 404", path, code, len(body))
		}
	}
	if code, _ := atkGet(t, addr, "/metrics"); code != http.StatusOK {
		t.Errorf("GET /metrics: %d", code)
	}
	peak := v.peakSample()
	after := v.settle(t, base)
	atkNothingGranted(t, v, 1)
	l.report(t, fmt.Sprintf("h admin beyond loopback (%s)", addr), base, peak, after, time.Since(start))
}
