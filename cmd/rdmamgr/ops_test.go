package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// startLongBench runs a bench against d that lasts until the test ends
// (SIGINT then).
func startLongBench(t *testing.T, d *daemon, extra ...string) *proc.Buffer {
	t.Helper()
	args := append([]string{"bench", "--peer", d.addr, "--size", "4KiB", "--count", "100000000"}, extra...)
	var stderr proc.Buffer
	b := spawnBin(t, nil, &stderr, args...)
	t.Cleanup(func() { _ = b.Signal(syscall.SIGINT); _ = b.Wait() })
	return &stderr
}

// "status lists outbound routes only (it showed routes: 0 while a peer was
// writing 69k frames into it), does not print auth_failures, has no --json"
func TestStatusShowsInboundRoutesAndJSON(t *testing.T) {
	d := startDaemon(t)
	startLongBench(t, d, "--backend", "tcp") // TCP: the daemon counts what it serves
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var doc statusDoc
	waitFor(t, "an inbound route in status --json", func() bool {
		out, stderr, code := runBin(t, ctx, "status", "--peer", d.addr, "--json")
		if code != 0 {
			t.Fatalf("status --json: exit %d: %s", code, stderr)
		}
		doc = statusDoc{}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return len(doc.Routes) == 1 && doc.Routes[0].Ops > 0
	})
	r := doc.Routes[0]
	if r.Direction != "in" || r.Backend != "tcp" || r.State != "up" || !strings.HasPrefix(r.Peer, "127.0.0.1:") || r.PeerID == "" || r.Why != "the peer's choice" {
		t.Errorf("inbound route: %+v", r)
	}
	if r.Ops == 0 || r.BytesPut != r.Ops*4096 || r.BytesGot != 0 || r.Errors != 0 || r.Ops > doc.Served.Ops {
		t.Errorf("inbound route counters: %+v (served in all: %+v)", r, doc.Served)
	}
	if doc.Version == "" || doc.UptimeSeconds <= 0 || doc.ManagerID == "" {
		t.Errorf("status --json lacks version, uptime or id: %+v", doc)
	}
	out, _, _ := runBin(t, ctx, "status", "--peer", d.addr)
	for _, want := range []string{"routes in: 1", "routes out: 0", "auth failures: 0", "version (devel)", "served for peers: ", `backend=tcp state=up`, `why="the peer's choice"`} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// status --watch repeats until interrupted (exit 130), one JSON object a
// line with --json.
func TestStatusWatch(t *testing.T) {
	d := startDaemon(t)
	var stdout proc.Buffer
	st := spawnBin(t, &stdout, nil, "status", "--peer", d.addr, "--json", "--watch", "50ms")
	waitFor(t, "three status lines", func() bool { return strings.Count(stdout.String(), "\n") >= 3 })
	_ = st.Signal(syscall.SIGINT)
	if err := st.Wait(); st.ExitCode() != 130 {
		t.Errorf("status --watch ended with %v, want exit 130", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var doc statusDoc
		if err := json.Unmarshal([]byte(l), &doc); err != nil {
			t.Errorf("line %q: %v", l, err)
		}
	}
}

// "The responder logs nothing when a route comes up or goes down … a PID is
// printed in two formats": both sides log route up and down with the peer;
// PIDs are address/name.
func TestRouteUpDownLoggedBothSides(t *testing.T) {
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, benchErr, code := runBin(t, ctx, "bench", "--peer", d.addr, "--count", "20", "--log-level", "info")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, benchErr)
	}
	peerRE := `peer=127\.0\.0\.1:\d+/rdma-manager`
	for _, re := range []string{`INF route up .*direction=out .*` + peerRE + ` .*why="[^"]+"`, `INF route down .*direction=out .*` + peerRE, `pid=127\.0\.0\.1:\d+/rdma-manager`} {
		if !regexp.MustCompile(re).MatchString(benchErr) {
			t.Errorf("bench's log has no line matching %s:\n%s", re, benchErr)
		}
	}
	waitFor(t, "the daemon to log the inbound route down", func() bool { return strings.Contains(d.stderr.String(), "route down") })
	log := d.stderr.String()
	for _, re := range []string{`INF route up .*direction=in .*peer=127\.0\.0\.1:\d+ .*why="the peer's choice`, `INF route down .*direction=in .*peer=127\.0\.0\.1:\d+ `, `pid=127\.0\.0\.1:\d+/rdma-manager`} {
		if !regexp.MustCompile(re).MatchString(log) {
			t.Errorf("daemon's log has no line matching %s:\n%s", re, log)
		}
	}
	for _, bad := range []string{`Address:"`, `Id:"`} {
		if strings.Contains(log+benchErr, bad) {
			t.Errorf("a log prints a PID as protobuf text (%s):\n%s\n%s", bad, log, benchErr)
		}
	}
}

// "Every run of the default build warns that there is no RDMA device, which
// is the expected state of that build."
func TestNoRDMADeviceLogIsInfo(t *testing.T) {
	d := startDaemon(t, "--log-level", "warn")
	d.stop(t)
	if log := d.stderr.String(); strings.Contains(log, "RDMA") {
		t.Errorf("serve at --log-level warn logs about RDMA devices:\n%s", log)
	}
	d = startDaemon(t)
	if !regexp.MustCompile(`INF backend not built: routes use the next one backend=ibverbs`).MatchString(d.stderr.String()) {
		t.Errorf("serve at info does not say it runs without ibverbs:\n%s", d.stderr.String())
	}
}

// serve tells systemd (Type=notify) READY=1 once it serves and STOPPING=1 on
// SIGTERM, through $NOTIFY_SOCKET.
func TestServeNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d := startDaemonEnv(t, []string{"NOTIFY_SOCKET=" + sock})
	read := func() string {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 256)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read notification: %v", err)
		}
		return string(buf[:n])
	}
	if got := read(); got != "READY=1" {
		t.Errorf("first notification %q, want READY=1", got)
	}
	_ = d.Signal(syscall.SIGTERM)
	if got := read(); got != "STOPPING=1" {
		t.Errorf("notification on SIGTERM %q, want STOPPING=1", got)
	}
	if code := d.ExitCode(); code != 0 {
		t.Errorf("serve exited %d on SIGTERM, want 0", code)
	}
}

// "No progress on long runs": a progress line when stdout is a terminal,
// none otherwise.
func TestBenchProgressOnlyOnTerminal(t *testing.T) {
	d := startDaemon(t)
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 10 * time.Millisecond
	for _, tty := range []bool{true, false} {
		var stdout, stderr bytes.Buffer
		args := []string{"bench", "--peer", d.addr, "--size", "64KiB", "--count", "4000", "--concurrency", "2"}
		if code := runCtx(context.Background(), args, &env{stdout: &stdout, stderr: &stderr, tty: tty}); code != 0 {
			t.Fatalf("bench: exit %d\n%s", code, stderr.String())
		}
		out := stdout.String()
		if got := strings.Contains(out, "\r\033[K") && strings.Contains(out, " ops "); got != tty {
			t.Errorf("tty=%v: progress line written: %v\n%q", tty, got, out)
		}
		if !strings.Contains(out, "\nthroughput: ") && !strings.HasPrefix(out, "throughput") && !strings.Contains(out, "op=put") {
			t.Errorf("tty=%v: no figures:\n%q", tty, out)
		}
	}
}

// contrib/rdmamgr.service is Type=notify and its serve command line parses.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "contrib/rdmamgr.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	if !strings.Contains(unit, "\nType=notify\n") {
		t.Error("unit is not Type=notify")
	}
	re := regexp.MustCompile(`(?m)^ExecStart=\S+ serve (.*)$`)
	m := re.FindStringSubmatch(unit)
	if m == nil {
		t.Fatal("no ExecStart=... serve line")
	}
	args := strings.Fields(strings.ReplaceAll(m[1], "${CREDENTIALS_DIRECTORY}", "/run/credentials/rdmamgr.service"))
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	serveFlags(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		t.Errorf("ExecStart's serve flags %q: %v (extra %q)", args, err, fs.Args())
	}
}

// The admin listener serves /healthz and /readyz beside /metrics, and
// /debug/pprof/ only with --pprof; --metrics-listen "" turns it off.
func TestAdminEndpoints(t *testing.T) {
	d := startDaemon(t)
	get := func(addr, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "rdmamgr_uptime_seconds"} {
		if code, body := get(d.metrics, path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, body lacks %q", path, code, want)
		}
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2"} {
		if code, _ := get(d.metrics, path); code != http.StatusNotFound {
			t.Errorf("GET %s without --pprof: %d, want 404", path, code)
		}
	}
	p := startDaemon(t, "--pprof")
	if code, body := get(p.metrics, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ with --pprof: %d", code)
	}
	if strings.Contains(d.stderr.String()+p.stderr.String(), "WARNING") {
		t.Errorf("a loopback admin listener was warned about:\n%s%s", d.stderr, p.stderr)
	}
	off := startDaemon(t, "--metrics-listen", "")
	waitFor(t, "the serving line", func() bool { return strings.Contains(off.stderr.String(), "serving") })
	if !strings.Contains(off.stderr.String(), "metrics=off") || off.metrics != "" {
		t.Errorf(`--metrics-listen "" still serves metrics:\n%s`, off.stderr.String())
	}
}

// Only loopback addresses keep the admin listener off the network.
func TestAdminLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8091": true, "[::1]:0": true, "localhost:9100": true, "127.0.0.5:1": true,
		"0.0.0.0:9100": false, ":9100": false, "[::]:9100": false, "10.1.2.3:9100": false, "example.com:1": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
