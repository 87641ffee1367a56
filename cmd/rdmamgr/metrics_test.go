package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// scrape reads http://addr/metrics with Prometheus's own text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", addr, err)
	}
	return mfs
}

// value sums the samples of family name whose labels include want.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	var sum float64
	for _, m := range mf.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func servedOps(t *testing.T, d *daemon) float64 {
	return value(scrape(t, d.metrics), "rdmamgr_served_ops_total", nil)
}

// The daemon's counters, scraped during a bench and after it, agree with
// the bench's own figures; the bench's manager exposes its operations and
// latency histogram the same way.
func TestMetricsAgreeWithBench(t *testing.T) {
	d := startDaemon(t)
	if d.metrics == "" {
		t.Fatal("serve did not log its metrics address")
	}
	const count, size = 20000, 16 << 10
	var stdout, stderr proc.Buffer
	// TCP: the daemon serves (and counts) every operation; an shm peer
	// copies without the owner.
	b := spawnBin(t, &stdout, &stderr, "bench", "--peer", d.addr, "--op", "put", "--size", "16KiB", "--backend", "tcp",
		"--count", fmt.Sprint(count), "--concurrency", "2", "--warmup", "0", "--json", "-", "--metrics-listen", "127.0.0.1:0")
	during := checkMidRun(t, d, &stderr, count, size)
	if err := b.Wait(); err != nil {
		t.Fatalf("bench: %v\n%s", err, stdout.String())
	}
	if during == 0 {
		t.Log("the bench ended before a scrape caught it mid-run")
	}
	var doc benchDoc
	if err := json.Unmarshal([]byte(stdout.String()), &doc); err != nil {
		t.Fatal(err)
	}
	mfs := scrape(t, d.metrics)
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rdmamgr_served_ops_total", nil, float64(doc.Ops)},
		{"rdmamgr_served_bytes_total", map[string]string{"direction": "in"}, float64(doc.Bytes)},
		{"rdmamgr_served_bytes_total", map[string]string{"direction": "out"}, 0},
		{"rdmamgr_served_rejected_total", nil, 0},
		{"rdmamgr_auth_failures_total", nil, 0},
		{"rdmamgr_route_setups_total", map[string]string{"direction": "in", "result": "ok"}, 1},
	}
	for _, c := range checks {
		if got := value(mfs, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, bench says %v", c.name, c.labels, got, c.want)
		}
	}
	if doc.Ops != count || doc.Bytes != count*size {
		t.Errorf("bench: %d ops %d bytes", doc.Ops, doc.Bytes)
	}
}

// checkMidRun scrapes the daemon, and once the bench's own listener, while
// a bench of count puts of size bytes runs: the counters move and never
// exceed the run. It returns how many scrapes caught the bench mid-run.
func checkMidRun(t *testing.T, d *daemon, benchStderr *proc.Buffer, count, size float64) int {
	t.Helper()
	benchMetricsRE := regexp.MustCompile(`metrics on http://(\S+)/metrics`)
	benchScraped := false
	during := 0
	for end := time.Now().Add(time.Minute); during < 2 && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		mfs := scrape(t, d.metrics)
		n := value(mfs, "rdmamgr_served_ops_total", nil)
		if n > 0 && n < count {
			during++
			if in := value(mfs, "rdmamgr_served_bytes_total", map[string]string{"direction": "in"}); in != n*size {
				t.Errorf("mid-run: served %v ops but %v bytes in", n, in)
			}
			if rb := value(mfs, "rdmamgr_remote_bytes", nil); rb != 2*size {
				t.Errorf("mid-run: remote_bytes %v, want the bench's buffer of %v", rb, 2*size)
			}
			if value(mfs, "rdmamgr_routes", map[string]string{"direction": "in", "state": "up"}) != 1 {
				t.Errorf("mid-run: no inbound route up in rdmamgr_routes")
			}
		}
		if m := benchMetricsRE.FindStringSubmatch(benchStderr.String()); m != nil && !benchScraped {
			benchScraped = true
			bm := scrape(t, m[1])
			ops := value(bm, "rdmamgr_ops_total", map[string]string{"op": "put", "backend": "tcp"})
			hist := value(bm, "rdmamgr_op_duration_seconds", map[string]string{"op": "put", "backend": "tcp"})
			// A scrape is no snapshot: operations complete between the
			// counter and the histogram being read, so mid-run the two
			// may differ by what completed meanwhile (seen: 5 and 7).
			if ops > count || hist > count {
				t.Errorf("bench's metrics mid-run: %v ops, %v latency samples (of %v)", ops, hist, count)
			}
		}
	}
	return during
}

// Debian's Prometheus server scrapes a daemon (skipped without it; .ci/run
// installs it).
func TestPrometheusScrapesDaemon(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (apt-get install prometheus): the scrape by a real server is not tested")
	}
	d := startDaemon(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rdmamgr\n    static_configs:\n      - targets: [%q]\n", d.metrics)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freeAddr(t)
	var logs proc.Buffer
	prom, err := proc.Spawn(proc.Spec{Name: "prometheus", Path: bin, Args: []string{"--config.file", filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path", filepath.Join(dir, "data"), "--web.listen-address", web}, Stdout: &logs, Stderr: &logs})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Kill()
	q := "http://" + web + "/api/v1/query?query=" + "rdmamgr_uptime_seconds%20and%20on()%20up%7Bjob%3D%22rdmamgr%22%7D%3D%3D1"
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get(q)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r struct {
			Status string
			Data   struct{ Result []json.RawMessage }
		}
		if json.Unmarshal(b, &r) == nil && r.Status == "success" && len(r.Data.Result) == 1 {
			return
		}
	}
	t.Fatalf("prometheus did not scrape rdmamgr_uptime_seconds from %s\n%s", d.metrics, tail(logs.String(), 2000))
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
