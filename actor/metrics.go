package actor

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Metrics counts what a manager's queue pairs and routes do, for
// Prometheus. Give one to Config.Metrics and register it, and the
// manager's Collector, with a prometheus.Registerer. The counters of
// operations are updated on the data path without allocating; everything
// else is read from the manager when it is scraped.
type Metrics struct {
	ops     *prometheus.CounterVec
	bytes   *prometheus.CounterVec
	errs    *prometheus.CounterVec
	latency *prometheus.HistogramVec
	setups  *prometheus.CounterVec
	downs   *prometheus.CounterVec

	// fast holds the label children of the common backend × op pairs, made
	// on first use, so the data path does no label lookup.
	fast [2][2]atomic.Pointer[opMetrics]
}

type opMetrics struct {
	ops, bytes prometheus.Counter
	latency    prometheus.Observer
}

// NewMetrics returns the operation and route metrics of one manager.
func NewMetrics() *Metrics {
	mt := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rdmamgr_ops_total", Help: "Operations completed successfully by this manager's queue pairs.",
		}, []string{"backend", "op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rdmamgr_bytes_total", Help: "Bytes moved by successful operations of this manager's queue pairs.",
		}, []string{"backend", "op"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rdmamgr_op_errors_total", Help: "Operations of this manager's queue pairs that failed, by kind of error.",
		}, []string{"backend", "op", "kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rdmamgr_op_duration_seconds",
			Help:    "Time from posting to completion of successful operations.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 20), // 5 µs .. 2.6 s
		}, []string{"backend", "op"}),
		setups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rdmamgr_route_setups_total", Help: "Route setups, by direction (out: we initiated) and result.",
		}, []string{"direction", "backend", "result"}),
		downs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rdmamgr_route_downs_total", Help: "Routes that went down, by direction.",
		}, []string{"direction", "backend"}),
	}
	return mt
}

// children returns the label children of kind × op.
func (mt *Metrics) children(kind backend.Kind, op backend.Op) *opMetrics {
	i, j := -1, 0
	switch kind {
	case backend.KindTCP:
		i = 0
	case backend.KindIBVerbs:
		i = 1
	}
	if op == backend.OpRead {
		j = 1
	}
	if i >= 0 {
		if m := mt.fast[i][j].Load(); m != nil {
			return m
		}
	}
	m := &opMetrics{
		ops:     mt.ops.WithLabelValues(string(kind), opName(op)),
		bytes:   mt.bytes.WithLabelValues(string(kind), opName(op)),
		latency: mt.latency.WithLabelValues(string(kind), opName(op)),
	}
	if i >= 0 {
		mt.fast[i][j].Store(m)
	}
	return m
}

func (mt *Metrics) vecs() []prometheus.Collector {
	return []prometheus.Collector{mt.ops, mt.bytes, mt.errs, mt.latency, mt.setups, mt.downs}
}

// Describe implements prometheus.Collector.
func (mt *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range mt.vecs() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (mt *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range mt.vecs() {
		c.Collect(ch)
	}
}

// opName names an operation as the API does.
func opName(op backend.Op) string {
	if op == backend.OpWrite {
		return "put"
	}
	return "get"
}

// Observe implements qpbind.Observer.
func (mt *Metrics) Observe(kind backend.Kind, op backend.Op, n uint64, d time.Duration, err error) {
	if err != nil {
		mt.errs.WithLabelValues(string(kind), opName(op), ErrorKind(err)).Inc()
		return
	}
	m := mt.children(kind, op)
	m.ops.Inc()
	m.bytes.Add(float64(n))
	m.latency.Observe(d.Seconds())
}

// routeSetup counts a route setup; nil-safe.
func (mt *Metrics) routeSetup(direction string, kind backend.Kind, err error) {
	if mt == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = ErrorKind(err)
	}
	mt.setups.WithLabelValues(direction, string(kind), result).Inc()
}

// routeDown counts a route that went down; nil-safe.
func (mt *Metrics) routeDown(direction string, kind backend.Kind) {
	if mt != nil {
		mt.downs.WithLabelValues(direction, string(kind)).Inc()
	}
}

// ErrorKind classifies err for metrics and logs: "canceled",
// "deadline_exceeded", "peer_gone", "unauthenticated", "bad_key", ... (the
// wire code, lower case).
func ErrorKind(err error) string {
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	return strings.ToLower(fromError(err).Code.String())
}
