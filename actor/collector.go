package actor

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmamgr/rdmamgr/internal/control"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Collector returns a prometheus.Collector of the manager's state, read at
// each scrape: routes by direction, backend and state; what it serves for
// peers; authentication failures; registered, remote-held and leased
// buffers; queue pairs. Register it beside the manager's Metrics. (The TCP
// data listener's gauges come from node.Node's Collector, which includes
// this one.)
func (m *Manager) Collector() prometheus.Collector { return managerCollector{m} }

type managerCollector struct{ m *Manager }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("rdmamgr_"+name, help, labels, nil)
}

var (
	descInfo       = desc("info", "Constant 1, labelled with the manager's id, backends and version.", "manager_id", "backends", "version")
	descRoutes     = desc("routes", "Routes by direction (out: we initiated; in: a peer did), backend and state.", "direction", "backend", "state")
	descServedOps  = desc("served_ops_total", "Data operations served for peers.", "backend")
	descServedB    = desc("served_bytes_total", "Bytes served for peers: in (written into our memory) and out (read from it).", "backend", "direction")
	descRejected   = desc("served_rejected_total", "Peer data operations refused (key, bounds, access, released, malformed).", "backend")
	descAuthFail   = desc("auth_failures_total", "Route handshakes and data connections refused at authentication.", "stage")
	descRegistered = desc("registered_bytes", "Bytes registered by this manager.")
	descRegions    = desc("registered_regions", "Regions registered by this manager.")
	descRemote     = desc("remote_bytes", "Bytes of buffers remote peers requested and still hold.")
	descLeased     = desc("leased_buffers", "Buffers with a lease.")
	descQPs        = desc("queue_pairs", "Queue pairs handed out and not released.")
	descUptime     = desc("uptime_seconds", "Seconds since the manager started.")
	descRefusals   = desc("refusals_total", "Control-plane requests and connections refused, by reason (their logs are sampled).", "reason")
	descCaps       = desc("cap_bytes", "The byte caps in force, by flag.", "flag")
	descSlabs      = desc("pool_slab_bytes", "Bytes of slabs mapped for pooled buffers (in use or spare; not in registered_bytes).")
	descCacheHits  = desc("registration_cache_hits_total", "Registrations of caller memory that reused a live registration of the same range and access.")
	descCacheMiss  = desc("registration_cache_misses_total", "Registrations of caller memory that found none to reuse.")
)

func (c managerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descRoutes, descServedOps, descServedB, descRejected,
		descAuthFail, descRegistered, descRegions, descRemote, descLeased, descQPs, descUptime, descRefusals, descCaps,
		descSlabs, descCacheHits, descCacheMiss} {
		ch <- d
	}
}

func (c managerCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	st := m.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descInfo, 1, fmt.Sprintf("%016x", m.id), st.Backend, st.Version)
	type routeKey struct{ dir, backend, state string }
	routes := make(map[routeKey]int)
	for _, r := range st.Routes {
		routes[routeKey{"out", r.Backend, routeState(r.State)}]++
	}
	for _, r := range st.Inbound {
		routes[routeKey{"in", r.Backend, routeState(r.State)}]++
	}
	for _, dir := range []string{"out", "in"} {
		for _, b := range m.backends { // every series from the start, at 0
			if k := (routeKey{dir, string(b.Kind()), "up"}); routes[k] == 0 {
				routes[k] = 0
			}
		}
	}
	for k, n := range routes {
		gauge(descRoutes, float64(n), k.dir, k.backend, k.state)
	}
	var backendAuth uint64
	for _, b := range m.backends {
		s := b.Served()
		k := string(b.Kind())
		counter(descServedOps, s.Ops, k)
		counter(descServedB, s.BytesIn, k, "in")
		counter(descServedB, s.BytesOut, k, "out")
		counter(descRejected, s.Rejected, k)
		backendAuth += s.AuthFail
	}
	counter(descAuthFail, m.authFailures.Load(), "handshake")
	counter(descAuthFail, backendAuth, "data_connection")
	gauge(descRegistered, float64(st.RegisteredBytes))
	gauge(descRegions, float64(st.BuffersTotal))
	gauge(descRemote, float64(st.RemoteBytes))
	gauge(descLeased, float64(st.LeasedBuffers))
	gauge(descQPs, float64(st.QueuePairs))
	gauge(descUptime, float64(st.UptimeMs)/1000)
	for _, reason := range knownRefusals {
		if _, ok := st.Refusals[reason]; !ok {
			counter(descRefusals, 0, reason) // every series from the start
		}
	}
	for reason, n := range st.Refusals {
		counter(descRefusals, n, reason)
	}
	gauge(descCaps, float64(st.MaxRegisteredBytes), "max-registered")
	gauge(descCaps, float64(st.MaxRemoteBytes), "max-remote")
	rs := m.reg.Stats()
	gauge(descSlabs, float64(rs.Slabs)*memreg.SlabSize)
	counter(descCacheHits, rs.CacheHits)
	counter(descCacheMiss, rs.CacheMisses)
}

// knownRefusals are the refusal reasons exported at 0 before their first
// event, so that absent() and rate() alerts work from the start.
var knownRefusals = []string{control.RefusedForgedSender, control.RefusedForeignTarget, control.RefusedMalformed,
	control.RefusedStopActor, control.RefusedUnknownType, control.RefusedNotLocal, control.RefusedLimit,
	control.RefusedHandshake, control.RefusedConn, control.RefusedStream, control.RefusedTLS}

// routeState reduces a status state ("failed: …", "down: …") to its word.
func routeState(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return s[:i]
		}
	}
	return s
}
