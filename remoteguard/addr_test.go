package remoteguard

import (
	"net"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"
)

func TestAdvertiseHost(t *testing.T) {
	routable, _, rerr := RoutableHost()
	cases := []struct {
		listen, advertise, want string
		picked, err             bool
	}{
		{"10.0.0.5", "", "10.0.0.5", false, false},
		{"127.0.0.1", "", "127.0.0.1", false, false},
		{"0.0.0.0", "10.0.0.7", "10.0.0.7", false, false},
		{"::", "host.example:9000", "host.example", false, false},
		{"", "0.0.0.0", "", false, true},
		{"10.0.0.5", "[::]:1", "", false, true},
		{"0.0.0.0", "", routable, true, rerr != nil},
		{"", "", routable, true, rerr != nil},
	}
	for _, c := range cases {
		got, picked, err := AdvertiseHost(c.listen, c.advertise)
		if (err != nil) != c.err || (err == nil && (got != c.want || picked != c.picked)) {
			t.Errorf("AdvertiseHost(%q, %q) = %q, %v, %v; want %q, %v, error %v", c.listen, c.advertise, got, picked, err, c.want, c.picked, c.err)
		}
		if err == nil && (IsWildcard(got) || got == "") {
			t.Errorf("AdvertiseHost(%q, %q) advertises a wildcard", c.listen, c.advertise)
		}
	}
}

// A wildcard bind never advertises the wildcard.
func TestStartWildcard(t *testing.T) {
	if _, _, err := RoutableHost(); err != nil {
		t.Skipf("no routable address here: %v", err)
	}
	sys := protoactor.NewActorSystem()
	defer sys.Shutdown()
	r, addr, err := Start(sys, "0.0.0.0:0", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer Stop(sys, r)
	h, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(h); IsWildcard(h) || h == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Fatalf("advertised %s", addr)
	}
}
