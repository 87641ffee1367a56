package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The scripts' parsing and tables, on canned inputs: bench/ucx.sh against
// a fake ucx_perftest, bench/samehost-table.sh on the files of a made-up
// run. (bench/samehost.sh itself runs both on real figures.)

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// script runs bash script args in dir with env added, and returns its
// stdout; a failure is the test's.
func script(t *testing.T, env []string, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %q: %v\nstdout:\n%s\nstderr:\n%s", script, args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// fakePerftest answers like ucx_perftest -f: a server exits at once; a
// client prints a Final line whose bandwidth is the message size in kB
// (so each row is told apart) plus 1000 for ucp_get, and whose latencies
// are 0.05/0.07 µs (ucp_get) or 0.04/0.06 µs (ucp_put_lat).
const fakePerftest = `#!/bin/sh
case "$1" in 127.0.0.1) ;; *) exit 0 ;; esac
test=""; size=""
while [ $# -gt 0 ]; do
  case "$1" in -t) test=$2; shift ;; -s) size=$2; shift ;; esac
  shift
done
echo "UCX_TLS=$UCX_TLS" >&2
bw=$((size / 1000))
p50=0.040; avg=0.060
[ "$test" = ucp_get ] && { bw=$((bw + 1000)); p50=0.050; avg=0.070; }
echo "+------+"
echo "Final:  100  $p50  $avg  $avg  $bw.50  $bw.50  1  1"
`

func fakeUCX(t *testing.T) []string {
	bin := t.TempDir()
	for name, body := range map[string]string{"ucx_perftest": fakePerftest, "ucx_info": "#!/bin/sh\necho '# Version 9.9.9'\n"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "UCX_ITERS=100"}
}

func TestUCXScript(t *testing.T) {
	needTools(t, "bash", "awk")
	env := fakeUCX(t)
	tsv := filepath.Join(t.TempDir(), "u.tsv")
	out := script(t, env, "ucx.sh", "--tls", "sm", "--sizes", "8B,1MiB", "--latency", "--tsv", tsv)
	for _, want := range []string{
		"UCX 9.9.9 ucx_perftest, UCX_TLS=sm, loopback; placement: any (no pinning)\n",
		"\n8B      put  ucp_put_bw -O 1            100         0.50\n",
		"\n1MiB    get  ucp_get                    100      2048.50\n",
		"\nlatency: 8B get, one at a time (ucp_get -s 8 -O 1), n=20000: p50 0.050 µs, average 0.070 µs\n",
		"\nlatency: 8B put ping-pong, half the round trip (ucp_put_lat -s 8), n=20000: p50 0.040 µs, average 0.060 µs\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "*") {
		t.Errorf("gets over sm marked as the tcp artefact:\n%s", out)
	}
	b, err := os.ReadFile(tsv)
	if err != nil {
		t.Fatal(err)
	}
	want := "8\t8B\tput\t0.50\tucp_put_bw\t100\n8\t8B\tget\t1000.50\tucp_get\t100\n" +
		"1048576\t1MiB\tput\t1048.50\tucp_put_bw\t100\n1048576\t1MiB\tget\t2048.50\tucp_get\t100\n" +
		"8\t8B\tlat_get\t0.050\tucp_get\t20000\t0.070\n8\t8B\tlat_put\t0.040\tucp_put_lat\t20000\t0.060\n"
	if string(b) != want {
		t.Errorf("--tsv:\n%s\nwant:\n%s", b, want)
	}
	// Over tcp the get is the responder artefact, marked, and the default
	// (compare.sh's) has no latency lines.
	out = script(t, env, "ucx.sh", "--sizes", "4KiB", "--ops", "get")
	if !strings.Contains(out, "UCX_TLS=tcp,") || !strings.Contains(out, "ucp_get *") || strings.Contains(out, "latency:") ||
		!strings.HasSuffix(out, "harness artefact, not UCX's get speed\n") {
		t.Errorf("tcp get:\n%s", out)
	}
	// --outstanding N: both put and get with -O N (the op-rate table).
	out = script(t, env, "ucx.sh", "--tls", "sm", "--sizes", "8B", "--outstanding", "64")
	if !strings.Contains(out, "\n8B      put  ucp_put_bw -O 64           100         0.50\n") ||
		!strings.Contains(out, "\n8B      get  ucp_get -O 64              100      1000.50\n") {
		t.Errorf("--outstanding 64:\n%s", out)
	}
	for _, bad := range [][]string{{"--tls", "sm;rm"}, {"--tls", ""}, {"--ops", "cas"}, {"--outstanding", "x"}} {
		cmd := exec.Command("bash", append([]string{"ucx.sh"}, bad...)...)
		cmd.Env = append(os.Environ(), env...)
		if err := cmd.Run(); err == nil {
			t.Errorf("ucx.sh %q succeeded", bad)
		}
	}
}

// A made-up run: shm at 1 MiB meets the memcpy goal on put and not on get,
// meets 1.5× UCX sm on put only, and 8-byte Get p50 1.5 µs.
const (
	oursJSON = `{"against": "memcpy", "placement": "split", "bench_cpu": 0, "server_cpu": 1, "backend": "BACKEND", "concurrency": 1, "inflight": 64,
  "throughput": [
    {"size": "8B", "size_bytes": 8, "op": "put", "count": 50000, "inflight": 64, "ours_mib_s": 0.5, "ours_ops_s": 65536, "memcpy_mib_s": 2500, "ratio": 0.0002},
    {"size": "1MiB", "size_bytes": 1048576, "op": "put", "count": 2048, "ours_mib_s": 20000, "memcpy_mib_s": 25000, "ratio": 0.8},
    {"size": "1MiB", "size_bytes": 1048576, "op": "get", "count": 2048, "ours_mib_s": 15000, "memcpy_mib_s": 25000, "ratio": 0.6}],
  "latency": {"size_bytes": 8, "count": 5000, "ours_p50_us": 1.5, "ours_p99_us": 3.25}}`
	smTSV = "1048576\t1MiB\tput\t10000.00\tucp_put_bw\t100\n1048576\t1MiB\tget\t12000.00\tucp_get\t100\n" +
		"8\t8B\tlat_get\t0.050\tucp_get\t20000\t0.070\n8\t8B\tlat_put\t0.040\tucp_put_lat\t20000\t0.060\n"
	pcTSV = "1048576\t1MiB\tput\t9000.00\tucp_put_bw\t100\n"
	// UCX sm with 64 outstanding: 8-byte puts at 1 MiB/s, 131072 ops/s.
	opTSV = "8\t8B\tput\t1.00\tucp_put_bw\t100\n"
)

func sameHostRun(t *testing.T, backend string) string {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"ours.json":         strings.Replace(oursJSON, "BACKEND", backend, 1),
		"ucx-sm.tsv":        smTSV,
		"ucx-posix-cma.tsv": pcTSV,
		"ucx-sm-oprate.tsv": opTSV,
		"ucx-sm.log":        "UCX 1.13.1 ucx_perftest, UCX_TLS=sm, loopback; placement: split\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSameHostTable(t *testing.T) {
	needTools(t, "bash", "awk", "jq")
	out := script(t, nil, "samehost-table.sh", sameHostRun(t, "shm"))
	for _, want := range []string{
		"Placement: **split** (bench, its memcpy and ucx_perftest's client on CPU 0; the manager and ucx_perftest's server on CPU 1). shm backend, 64 operations at sizes up to 4KiB (one goroutine posts and reaps them), 1 operation above in flight;",
		"\nOp rate, 64 in flight (ours: `rdmamgr bench --inflight 64`; UCX sm: ucp_put_bw -O 64, ucp_get -O 64):\n",
		"\n| 8B | put | 64 | 65536 | 0.5 | 131072 | 0.50 |\n",
		"\nGoals:\n- 8B put op rate ≥ 0.5× UCX sm (same in flight): 0.50 — met\n",
		"UCX 1.13.1 ucx_perftest (put: ucp_put_bw -O 1; get: ucp_get).\n",
		"\n| 8B | put | 0.5 | 2500.0 | 0.0002 | - | - | - |\n",
		"\n| 1MiB | put | 20000.0 | 25000.0 | 0.80 | 10000.0 | 2.00 | 9000.0 |\n",
		"\n| 1MiB | get | 15000.0 | 25000.0 | 0.60 | 12000.0 | 1.25 | - |\n",
		"\n- 8-byte Get round trip, one at a time: ours p50 1.5 µs, p99 3.25 µs (5000 round trips; placement split).\n",
		"\n- UCX sm, 8 bytes: get one at a time p50 0.050 µs (average 0.070); put ping-pong, half the round trip, p50 0.040 µs (average 0.060).\n",
		"\n- UCX sm 1MiB put runs at 0.40× this run's memcpy: ≥1.5× UCX sm needs ours at 0.60× memcpy.\n",
		"\n- UCX sm 1MiB get runs at 0.48× this run's memcpy: ≥1.5× UCX sm needs ours at 0.72× memcpy.\n",
		"\n- put 1MiB ≥ 0.7× memcpy: 0.8 — met\n- get 1MiB ≥ 0.7× memcpy: 0.6 — NOT met\n" +
			"- put 1MiB ≥ 1.5× UCX sm: 2.00 — met\n- get 1MiB ≥ 1.5× UCX sm: 1.25 — NOT met\n- 8-byte Get p50 ≤ 2 µs: 1.5 µs — met\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "PLACEHOLDER") || strings.Contains(out, "UCX posix,cma, 8 bytes") {
		t.Errorf("shm run with a placeholder note or posix,cma latency it does not have:\n%s", out)
	}
	out = script(t, nil, "samehost-table.sh", sameHostRun(t, "tcp"))
	if !strings.Contains(out, "**PLACEHOLDER: the \"ours\" figures are the tcp backend's, not shm's**") ||
		!strings.HasSuffix(out, "- (placeholder: measured on the tcp backend; the goals are shm's)\n") {
		t.Errorf("tcp run without the placeholder notes:\n%s", out)
	}
}

// fakeRdmamgr writes, for bench --json PATH, a canned report whose ours
// runs at 1, 0.5 and 2 times the baseline in its first, second and third
// call of each kind (tcp, shm, --procs), so the median is 1 and the range
// 0.50–2.00. UCX sm (fakePerftest) does 8-byte puts at 0.5 MiB/s: 65536/s.
const fakeRdmamgr = `#!/bin/bash
json=""; kind=tcp
while [ $# -gt 0 ]; do
  case "$1" in --json) json=$2; shift ;; --procs) kind=procs ;; shm) kind=shm ;; esac
  shift
done
n=$(( $(cat "$STATE/$kind" 2>/dev/null || echo 0) + 1 )); echo $n >"$STATE/$kind"
f=$(echo "1 0.5 2" | cut -d' ' -f$n)
case $kind in
  tcp) echo "{\"throughput\": [{\"size\": \"8B\", \"op\": \"put\", \"inflight\": 64, \"ours_ops_s\": $(awk "BEGIN{print 1000*$f}"), \"tcp_ops_s\": 1000, \"ratio\": $f}],
    \"latency\": {\"ours_p50_us\": 30, \"tcp_p50_us\": 30, \"ratio_p50\": 1}, \"pipeline\": {\"depth\": 64, \"ours_ops_s\": 500, \"tcp_ops_s\": 1000, \"ratio\": 0.5}}" >"$json" ;;
  shm) echo "{\"throughput\": [{\"size\": \"8B\", \"size_bytes\": 8, \"op\": \"put\", \"inflight\": 64, \"ours_ops_s\": $(awk "BEGIN{print 65536*$f}")}]}" >"$json" ;;
  procs) echo "{\"throughput\": [{\"size\": \"4KiB\", \"op\": \"get\", \"inflight\": 64, \"ours_ops_s\": $(awk "BEGIN{print 2000*$f}"), \"tcp_ops_s\": 2000, \"ratio\": $f}]}" >"$json" ;;
esac
`

func TestOpRateScript(t *testing.T) {
	needTools(t, "bash", "awk", "jq")
	env := fakeUCX(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "rdmamgr")
	if err := os.WriteFile(bin, []byte(fakeRdmamgr), 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, "RDMAMGR="+bin, "STATE="+dir)
	out := script(t, env, "oprate.sh", "--runs", "3", "--procs", "4")
	for _, want := range []string{
		"CPUs, 3 runs each: median (lowest–highest)\n",
		"\n| 8B | put | 64 | 1000 | 1000 | 1.00 (0.50–2.00) |\n",
		"\n| 8B get p50 µs (lower is better) |  | 1 | 30.0 | 30.0 | 1.00 (1.00–1.00) |\n",
		"\n| 64B put pipeline (request/response) |  | 64 | 500 | 1000 | 0.50 (0.50–0.50) |\n",
		"\n## shm, 64 in flight, placement split: ours against UCX sm with as many outstanding\n",
		"\n| 8B | put | 64 | 65536 | 65536 | 1.00 (0.50–2.00) |\n",
		"\n## 4 bench processes against one manager (TCP, placement any), against 4 plain TCP streams\n",
		"\n| 4KiB | get | 64 | 2000 | 2000 | 1.00 (0.50–2.00) |\n",
		"Reproduce: `bench/oprate.sh --no-tcp --no-shm --procs 4 --inflight 64`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
