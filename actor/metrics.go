package actor

import (
	"context"
	"errors"
	"strings"
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

	// fast holds the label children of every known backend × op, made
	// with the Metrics: the data path does no label lookup, and every
	// series exists (at 0) from the start, for absent() and rate().
	fast [len(knownKinds)][len(knownOps)]*opMetrics
}

// knownKinds and knownOps are the label values made up front.
var (
	knownKinds = [...]backend.Kind{backend.KindTCP, backend.KindIBVerbs, backend.KindSHM}
	knownOps   = [...]backend.Op{backend.OpWrite, backend.OpRead, backend.OpWriteImm, backend.OpSend, backend.OpCompareSwap, backend.OpFetchAdd}
)

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
	for i, k := range knownKinds {
		for j, op := range knownOps {
			mt.fast[i][j] = mt.newChildren(k, op)
		}
	}
	return mt
}

func (mt *Metrics) newChildren(kind backend.Kind, op backend.Op) *opMetrics {
	return &opMetrics{
		ops:     mt.ops.WithLabelValues(string(kind), opName(op)),
		bytes:   mt.bytes.WithLabelValues(string(kind), opName(op)),
		latency: mt.latency.WithLabelValues(string(kind), opName(op)),
	}
}

// children returns the label children of kind × op.
func (mt *Metrics) children(kind backend.Kind, op backend.Op) *opMetrics {
	for i, k := range knownKinds {
		if k != kind {
			continue
		}
		for j, o := range knownOps {
			if o == op {
				return mt.fast[i][j]
			}
		}
	}
	return mt.newChildren(kind, op)
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

// opName names an operation as the API does, each verb its own label.
func opName(op backend.Op) string {
	switch op {
	case backend.OpWrite:
		return "put"
	case backend.OpRead:
		return "get"
	case backend.OpWriteImm:
		return "put_with_imm"
	case backend.OpSend:
		return "send"
	case backend.OpCompareSwap:
		return "cas"
	case backend.OpFetchAdd:
		return "fetch_add"
	}
	return "unknown"
}

// metricsObserver is Metrics as the queue pairs' qpbind.Observer: the
// method the interface needs stays off Metrics' public API.
type metricsObserver Metrics

// Observe counts one finished operation.
func (o *metricsObserver) Observe(kind backend.Kind, op backend.Op, n uint64, d time.Duration, err error) {
	mt := (*Metrics)(o)
	if err != nil {
		mt.errs.WithLabelValues(string(kind), opName(op), errorKind(err)).Inc()
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
		result = errorKind(err)
	}
	mt.setups.WithLabelValues(direction, string(kind), result).Inc()
}

// routeDown counts a route that went down; nil-safe.
func (mt *Metrics) routeDown(direction string, kind backend.Kind) {
	if mt != nil {
		mt.downs.WithLabelValues(direction, string(kind)).Inc()
	}
}

// errorKind classifies err for metrics and logs: "canceled",
// "deadline_exceeded", "peer_gone", "unauthenticated", "bad_key", ... (the
// wire code, lower case).
func errorKind(err error) string {
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	return strings.ToLower(fromError(err).Code.String())
}
