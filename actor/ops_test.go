package actor

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// "repeat sentinels (backend: unauthenticated: backend: unauthenticated:
// …)": a wire error says its sentinel once and still matches it.
func TestToErrorSaysSentinelOnce(t *testing.T) {
	for _, c := range []struct {
		code rdmapb.Code
		msg  string
		want string
		is   []error
	}{
		{rdmapb.Code_UNAUTHENTICATED, "handshake MAC does not verify: unauthenticated: unauthenticated",
			"handshake MAC does not verify: unauthenticated", []error{rdmamgr.ErrUnauthenticated}},
		{rdmapb.Code_UNAUTHENTICATED, "unauthenticated", "unauthenticated", []error{rdmamgr.ErrUnauthenticated}},
		{rdmapb.Code_BAD_KEY, "region 3: bad key", "region 3: bad key", []error{rdmamgr.ErrBadKey}},
		{rdmapb.Code_RESOURCE_EXHAUSTED, "3 routes, the most allowed (serve --max-routes): limit exceeded: limit exceeded",
			"3 routes, the most allowed (serve --max-routes): limit exceeded", []error{rdmamgr.ErrLimit, rdmamgr.ErrLimit}},
		{rdmapb.Code_CLOSED, "manager 1: closed", "manager 1: closed", []error{rdmamgr.ErrClosed, rdmamgr.ErrClosed}},
		{rdmapb.Code_NOT_LOCAL, "queue pairs are handed only to callers in the manager's process: not local",
			"queue pairs are handed only to callers in the manager's process: not local", []error{rdmamgr.ErrNotLocal, rdmamgr.ErrInvalid}},
		{rdmapb.Code_RELEASED, "no such buffer (released, or not this key)",
			"no such buffer (released, or not this key): released or unknown", []error{rdmamgr.ErrReleased, rdmamgr.ErrBadKey}},
	} {
		err := toError(&rdmapb.Error{Code: c.code, Message: c.msg})
		if err.Error() != c.want {
			t.Errorf("toError(%s, %q) = %q, want %q", c.code, c.msg, err, c.want)
		}
		for _, s := range c.is {
			if !errors.Is(err, s) {
				t.Errorf("toError(%s) does not match %v", c.code, s)
			}
		}
	}
}

// "Error texts show Go type names and protobuf text (*rdmapb.RequestBuffer
// to Address:"…" Id:"…")"
func TestClientErrorsReadLikeGo(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	_, err := NewClient(sys, sys.NewLocalPID("nobody")).RequestBuffer(ctx, 4096, buffer.AccessRead)
	if err == nil {
		t.Fatal("request to no manager succeeded")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "request buffer from nonhost/nobody: no such manager") || strings.Contains(msg, `Address:"`) || strings.Contains(msg, "*rdmapb") {
		t.Errorf("error %q", msg)
	}
	if !errors.Is(err, rdmamgr.ErrUnknownPeer) {
		t.Errorf("error %q does not match ErrUnknownPeer", msg)
	}
}

// "the limit error does not name the flag that sets the limit"
func TestLimitErrorsNameTheirFlag(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	a := startManager(t, sys, Config{Name: "a", MaxRoutes: 1, Limits: buffer.Limits{MaxBytes: 8192}})
	b := startManager(t, sys, Config{Name: "b"})
	c := startManager(t, sys, Config{Name: "c"})
	requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	_, err := a.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	if err == nil || !strings.Contains(err.Error(), "--max-registered") || !errors.Is(err, rdmamgr.ErrLimit) {
		t.Errorf("over --max-registered: %v", err)
	}
	qp := requestQP(t, ctx, a, b.PID())
	defer qp.Release()
	_, err = a.Client().RequestQueuePair(ctx, c.PID())
	if err == nil || !strings.Contains(err.Error(), "--max-routes") || !errors.Is(err, rdmamgr.ErrLimit) {
		t.Errorf("over --max-routes: %v", err)
	}
}

// Metrics count the operations of the manager's queue pairs (successes with
// bytes and latency, failures by kind) and route setups on both sides.
func TestMetricsCountOperations(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	ma, mb := NewMetrics(), NewMetrics()
	a := startManager(t, sys, Config{Name: "a", Metrics: ma})
	b := startManager(t, sys, Config{Name: "b", Metrics: mb})
	local := requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), 4096, buffer.AccessRead)
	qp := requestQP(t, ctx, a, b.PID())
	defer qp.Release()
	for i := 0; i < 3; i++ {
		if err := qp.Get(local, remote).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := qp.Put(local, remote).Wait(ctx); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("put to a read-only buffer: %v", err)
	}
	for _, c := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{ma.ops.WithLabelValues("tcp", "get"), 3},
		{ma.bytes.WithLabelValues("tcp", "get"), 3 * 4096},
		{ma.ops.WithLabelValues("tcp", "put"), 0},
		{ma.errs.WithLabelValues("tcp", "put", "access_denied"), 1},
		{ma.setups.WithLabelValues("out", "tcp", "ok"), 1},
		{mb.setups.WithLabelValues("in", "tcp", "ok"), 1},
	} {
		if got := sample(t, c.c); got != c.want {
			t.Errorf("%v = %v, want %v", c.c.(prometheus.Metric).Desc(), got, c.want)
		}
	}
	if n := len(collect(ma.latency)); n != len(knownKinds)*len(knownOps) {
		t.Errorf("latency histograms: %d series, want %d (every backend × op)", n, len(knownKinds)*len(knownOps))
	}
	mfs, err := registry(t, a, ma).Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	// The data listener's gauges are node's (TestCollectorHasDataListener).
	for _, n := range []string{"rdmamgr_routes", "rdmamgr_registered_bytes", "rdmamgr_uptime_seconds", "rdmamgr_served_ops_total",
		"rdmamgr_auth_failures_total"} {
		if !names[n] {
			t.Errorf("registry lacks %s", n)
		}
	}
}

func collect(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	return ms
}

// sample is the value of a collector's one counter.
func sample(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	var sum float64
	for _, m := range collect(c) {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}

func registry(t *testing.T, m *Manager, mt *Metrics) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(mt); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(m.Collector()); err != nil {
		t.Fatal(err)
	}
	return reg
}
