package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmamgr/rdmamgr/backend/tcp"
)

// Collector returns a prometheus.Collector of the node's state, read at
// each scrape: the manager's (actor.Manager.Collector) and the TCP data
// listener's. Register it beside the manager's Metrics (nil with
// Config.NoManager).
func (n *Node) Collector() prometheus.Collector {
	if n.mgr == nil {
		return nil
	}
	return collectors{n.mgr.Collector(), listenerCollector{n.tcp}}
}

// collectors is several collectors as one.
type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("rdmamgr_"+name, help, labels, nil)
}

var (
	descListenerUp = desc("data_listener_up", "1 while the TCP data listener accepts connections, 0 once it died (status shows why).")
	descAcceptRetr = desc("data_accept_retries_total", "Accepts of the TCP data listener retried after a temporary error (EMFILE, ...).")
	descPending    = desc("data_pending_conns", "TCP data connections accepted that have not finished their hello.")
	descConnRefuse = desc("data_conns_refused_total", "TCP data connections closed at accept, by cap (pending: unauthenticated caps; full: authenticated slots; per_peer: the peer's share).", "cap")
)

// listenerCollector reads the TCP data listener's state at each scrape.
type listenerCollector struct{ t *tcp.Backend }

func (c listenerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descListenerUp, descAcceptRetr, descPending, descConnRefuse} {
		ch <- d
	}
}

func (c listenerCollector) Collect(ch chan<- prometheus.Metric) {
	ls := c.t.Listener()
	up := 1.0
	if ls.Err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descListenerUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descAcceptRetr, prometheus.CounterValue, float64(ls.AcceptRetries))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(ls.Pending))
	ch <- prometheus.MustNewConstMetric(descConnRefuse, prometheus.CounterValue, float64(ls.RefusedPending), "pending")
	ch <- prometheus.MustNewConstMetric(descConnRefuse, prometheus.CounterValue, float64(ls.RefusedFull), "full")
	ch <- prometheus.MustNewConstMetric(descConnRefuse, prometheus.CounterValue, float64(ls.RefusedPeer), "per_peer")
}
