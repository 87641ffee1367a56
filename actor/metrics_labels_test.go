package actor

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Every verb has its own op label (PutWithImm, Send and the atomics counted
// as "get"), and every known series exists at 0 before its first event, so
// absent() and rate() alerts work from the start (issue 23 point 9).
func TestMetricsLabelEveryVerbFromTheStart(t *testing.T) {
	mt := NewMetrics()
	for _, kind := range []string{"tcp", "shm", "ibverbs"} {
		for _, op := range []string{"put", "get", "put_with_imm", "send", "cas", "fetch_add"} {
			if !hasSeries(collect(mt.ops), map[string]string{"backend": kind, "op": op}) {
				t.Errorf("rdmamgr_ops_total{backend=%q,op=%q} absent before its first event", kind, op)
			}
		}
	}
	for op, name := range map[backend.Op]string{backend.OpWriteImm: "put_with_imm", backend.OpSend: "send",
		backend.OpCompareSwap: "cas", backend.OpFetchAdd: "fetch_add"} {
		(*metricsObserver)(mt).Observe(backend.KindTCP, op, 8, time.Microsecond, nil)
		if got := sample(t, mt.ops.WithLabelValues("tcp", name)); got != 1 {
			t.Errorf("%v counted under op=%s: %v, want 1", op, name, got)
		}
	}
	if got := sample(t, mt.ops.WithLabelValues("tcp", "get")); got != 0 {
		t.Errorf("op=get counted %v other verbs", got)
	}

	sys := newSystem(t)
	m := startManager(t, sys, Config{Name: "a", Metrics: mt})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"rdmamgr_refusals_total": {"reason": "tls"},
		"rdmamgr_routes":         {"direction": "out", "backend": "tcp", "state": "up"},
	}
	for _, mf := range mfs {
		if w, ok := want[mf.GetName()]; ok {
			for _, m := range mf.GetMetric() {
				if labelsMatch(m.GetLabel(), w) {
					delete(want, mf.GetName())
				}
			}
		}
	}
	for name, labels := range want {
		t.Errorf("%s%v absent before its first event", name, labels)
	}
}

func hasSeries(ms []prometheus.Metric, want map[string]string) bool {
	for _, m := range ms {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			continue
		}
		if labelsMatch(pb.GetLabel(), want) {
			return true
		}
	}
	return false
}

func labelsMatch(ls []*dto.LabelPair, want map[string]string) bool {
	n := 0
	for _, l := range ls {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}
