package remoteguard

import (
	"errors"
	"fmt"
	"net"
)

// Addresses that reach: a listener advertises an address peers can dial,
// never a wildcard.

// IsWildcard reports whether host (no port; "" counts) binds every address.
func IsWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// RoutableHost returns the first global unicast address of the first
// interface that is up and not loopback, preferring IPv4, and the
// interface's name. It fails when the host has none.
func RoutableHost() (host, ifName string, err error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", "", err
	}
	var v6, v6If string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			if ipn.IP.To4() != nil {
				return ipn.IP.String(), ifc.Name, nil
			}
			if v6 == "" {
				v6, v6If = ipn.IP.String(), ifc.Name
			}
		}
	}
	if v6 != "" {
		return v6, v6If, nil
	}
	return "", "", errors.New("no interface is up with a global unicast address: give --advertise HOST")
}

// AdvertiseHost decides the host peers use for a manager that binds
// listenHost: advertise when set (it must not be a wildcard), the bind
// address when it is specific, else RoutableHost. picked reports that the
// host was picked from the interfaces (the caller logs it).
func AdvertiseHost(listenHost, advertise string) (host string, picked bool, err error) {
	if advertise != "" {
		h := advertise
		if hh, _, err := net.SplitHostPort(advertise); err == nil {
			h = hh
		}
		if IsWildcard(h) {
			return "", false, fmt.Errorf("advertise %q: a wildcard address is not dialable", advertise)
		}
		return h, false, nil
	}
	if !IsWildcard(listenHost) {
		return listenHost, false, nil
	}
	h, _, err := RoutableHost()
	if err != nil {
		return "", false, fmt.Errorf("listen on %q without an advertised address: %w", listenHost, err)
	}
	return h, true, nil
}
