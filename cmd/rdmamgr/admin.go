package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/node"
)

// adminServer serves /metrics, /healthz, /readyz and /debug/pprof/ for
// one manager.
type adminServer struct {
	srv      *http.Server
	ln       net.Listener
	mgr      *actor.Manager
	stopping atomic.Bool // set when shutdown starts: /readyz fails
	done     chan struct{}
}

// metricsRegistry gathers the node's metrics (manager and data listener)
// and the Go and process collectors.
func metricsRegistry(n *node.Node, mt *actor.Metrics) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(mt, n.Collector(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newAdminServer builds the handlers; it does no I/O (serve does).
func newAdminServer(m *actor.Manager, reg *prometheus.Registry) *adminServer {
	a := &adminServer{mgr: m, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", a.readyz)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return a
}

// readyz answers 200 once the manager actor answers a ping, 503 otherwise
// and from the start of shutdown.
func (a *adminServer) readyz(w http.ResponseWriter, r *http.Request) {
	if a.stopping.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := a.mgr.Client().Ping(ctx); err != nil {
		http.Error(w, "manager not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// listen binds addr and serves in the background.
func (a *adminServer) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	a.ln = ln
	go func() {
		defer close(a.done)
		_ = a.srv.Serve(ln) // ends with http.ErrServerClosed on close

	}()
	return nil
}

// Addr is the bound address.
func (a *adminServer) Addr() string { return a.ln.Addr().String() }

// close stops serving; requests in progress get a short grace.
func (a *adminServer) close() {
	a.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		_ = a.srv.Close()
	}
	<-a.done
}
