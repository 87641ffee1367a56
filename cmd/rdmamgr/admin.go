package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/node"
)

// The admin listener's caps: it holds at most adminMaxConns connections
// (more are closed as they are accepted), a request's header must arrive
// within adminHeaderTimeout and its body within adminReadTimeout, and a
// keep-alive connection idle for adminIdleTimeout is closed.
const (
	adminMaxConns      = 64
	adminHeaderTimeout = 5 * time.Second
	adminReadTimeout   = 10 * time.Second
	adminIdleTimeout   = 30 * time.Second
	adminMaxHeader     = 16 << 10
)

// adminServer serves /metrics, /healthz, /readyz and, when asked
// (servePprof), /debug/pprof/ for one manager.
type adminServer struct {
	mux      *http.ServeMux
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
	a.mux = mux
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: adminHeaderTimeout, ReadTimeout: adminReadTimeout,
		IdleTimeout: adminIdleTimeout, MaxHeaderBytes: adminMaxHeader}
	return a
}

// servePprof adds /debug/pprof/ (serve --pprof): command line, goroutine
// dumps, heap, CPU and trace profiles. Off unless asked.
func (a *adminServer) servePprof() {
	a.mux.HandleFunc("/debug/pprof/", pprof.Index)
	a.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	a.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	a.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	a.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
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
	a.ln = &capListener{Listener: ln, max: adminMaxConns}
	ln = a.ln
	go func() {
		defer close(a.done)
		_ = a.srv.Serve(ln) // ends with http.ErrServerClosed on close

	}()
	return nil
}

// capListener closes connections past max held at once as it accepts
// them: idle clients cannot take every file descriptor of the daemon.
type capListener struct {
	net.Listener
	max int
	n   atomic.Int64
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.n.Add(1) > int64(l.max) {
			l.n.Add(-1)
			c.Close()
			continue
		}
		return &cappedConn{Conn: c, l: l}, nil
	}
}

// cappedConn gives its slot back on its first Close.
type cappedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() { c.l.n.Add(-1) })
	return c.Conn.Close()
}

// isLoopback reports whether the admin listener's HOST:PORT binds only
// loopback ("localhost" included); a wildcard or any other address
// reaches the network.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// warnAdminExposure says loudly, on stderr whatever the log level and in
// the log, that the admin listener asked for (addr, bound at bound)
// reaches beyond loopback, and whether it serves pprof there.
func warnAdminExposure(stderr io.Writer, zl *zerolog.Logger, addr, bound string, pprofOn bool) {
	if isLoopback(addr) {
		return
	}
	what := "/metrics, /healthz and /readyz"
	if pprofOn {
		what += " and /debug/pprof/ (command line, goroutine dumps, heap, CPU and trace profiles)"
	}
	fmt.Fprintf(stderr, "rdmamgr: WARNING: --metrics-listen %s (%s) is not loopback: %s are served to the network, without authentication\n", addr, bound, what)
	zl.Warn().Str("metrics_listen", addr).Str("bound", bound).Bool("pprof", pprofOn).Msg("admin listener reachable beyond loopback")
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
