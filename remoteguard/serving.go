package remoteguard

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Start returns only once the gRPC server's accept loop runs, so that
// starting another remote in the same process afterwards is ordered after
// this one's start. protoactor's remote.Start replaces grpc's global logger
// (grpclog.SetLoggerV2) without synchronisation, and grpc's Serve reads it
// as it starts: two remotes started one after the other raced (the race
// detector saw it in every test with two nodes). The order comes from a
// probe: Start connects to its own server from a port it picked, and the
// server's connection cap, which runs on the goroutine Serve started for
// the accepted connection, recognises the probe, closes it without
// counting it anywhere, and signals. It answers the probe with io.EOF, the
// one handshake error grpc neither logs nor counts (so nothing on that
// goroutine reads the logger after the signal).
type prober struct {
	port   atomic.Int32 // local port of the probe connection; 0: none
	served chan struct{}
	once   sync.Once
}

// probeWait bounds the wait for the probe: past it Start returns anyway
// (the probe only orders starts; the server is up either way).
const probeWait = 5 * time.Second

func newProber() *prober { return &prober{served: make(chan struct{})} }

// take reports whether raw is the probe, signalling if so.
func (p *prober) take(raw net.Conn) bool {
	ra, la := addrOf(raw.RemoteAddr()), addrOf(raw.LocalAddr())
	tcp, ok := raw.RemoteAddr().(*net.TCPAddr)
	if !ok || p.port.Load() == 0 || int32(tcp.Port) != p.port.Load() || !sameHost(ra, la) {
		return false
	}
	p.port.Store(0)
	p.once.Do(func() { close(p.served) })
	return true
}

// await connects to the server listening on bindHost:port (a wildcard
// bind is reached on loopback) from a port picked for the probe, and waits
// for the server to see it.
func (p *prober) await(bindHost string, port int) {
	host := strings.Trim(bindHost, "[]")
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	from, err := freePort(bracket(host))
	if err != nil {
		return
	}
	p.port.Store(int32(from))
	defer p.port.Store(0) // a later connection from that port is a peer's
	d := net.Dialer{Timeout: probeWait, LocalAddr: &net.TCPAddr{IP: net.ParseIP(host), Port: from}}
	c, err := d.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return
	}
	defer c.Close()
	t := time.NewTimer(probeWait)
	defer t.Stop()
	select {
	case <-p.served:
	case <-t.C:
	}
}

func bracket(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}
