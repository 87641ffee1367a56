package actor

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/rdmamgr/rdmamgr/backend/tcp"
)

func newRemoteOpts(opts []RemoteOption) *remoteOpts {
	o := &remoteOpts{}
	for _, f := range opts {
		f(o)
	}
	return o
}

// resolve returns the bind host and port for protoactor's Configure (IPv6
// in brackets) and the address to advertise ("" when it is the listener's
// own). A wildcard bind without an advertised host advertises a routable
// address of this host, picked from the interfaces and logged. When the
// advertised host differs from the bind host and the port is 0, a free port
// is picked first, as protoactor needs the full advertised address before
// it listens.
func (o *remoteOpts) resolve(host string, port int) (bindHost string, bindPort int, adv string, err error) {
	advHost, picked, err := AdvertiseHost(host, o.advertise)
	if err != nil {
		return "", 0, "", err
	}
	if picked && o.log != nil {
		_, ifName, _ := RoutableHost()
		o.log.Info("wildcard bind: advertising a routable address of this host", "advertise", advHost, "interface", ifName)
	}
	bindHost = host
	if strings.Contains(host, ":") {
		bindHost = "[" + host + "]"
	}
	advPort := port
	if o.advertise != "" {
		if _, p, err := net.SplitHostPort(o.advertise); err == nil {
			if advPort, err = strconv.Atoi(p); err != nil {
				return "", 0, "", fmt.Errorf("advertise %q: bad port", o.advertise)
			}
		}
	}
	if advHost == host && advPort == port {
		return bindHost, port, "", nil
	}
	if port == 0 {
		if port, err = freePort(bindHost); err != nil {
			return "", 0, "", err
		}
		if advPort == 0 {
			advPort = port
		}
	}
	return bindHost, port, joinPort(advHost, advPort), nil
}

// freePort returns a port that was free on host a moment ago.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		return 0, fmt.Errorf("pick a port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// endpointQueueInitial is the initial size of protoactor's queue of
// messages to one peer. The queue grows as needed; protoactor's default
// initial size, 1,000,000 slots, made every peer cost 16 MB in each
// direction before a message was sent (TestControlConnCost).
const endpointQueueInitial = 256

// dataNearRemote puts a TCP data listener that was left at its default
// next to the actor system: bound to the advertised host, port 0, and
// advertised there, so peers on other hosts reach it as they reach the
// actor system. A system without remote ("nonhost") keeps loopback.
func dataNearRemote(cfg *tcp.Config, sysAddr string) {
	if cfg.ListenAddr != "" || cfg.AdvertiseAddr != "" {
		return
	}
	host, _, err := net.SplitHostPort(sysAddr)
	if err != nil || IsLoopback(host) {
		return
	}
	cfg.ListenAddr = net.JoinHostPort(host, "0")
}
