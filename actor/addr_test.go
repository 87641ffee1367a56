package actor

import (
	"errors"
	"testing"
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

func TestCheckReply(t *testing.T) {
	cases := []struct {
		self, peer string
		bad        bool
	}{
		{"127.0.0.1:5000", "127.0.0.1:6000", false},
		{"127.0.0.1:5000", "[::1]:6000", false},
		{"127.0.0.1:5000", "localhost:6000", false},
		{"127.0.0.1:5000", "10.0.0.2:6000", true},
		{"localhost:5000", "host.example:6000", true},
		{"10.0.0.1:5000", "10.0.0.2:6000", false},
		{"nonhost", "10.0.0.2:6000", false},
		{"127.0.0.1:5000", "nonhost", false},
	}
	for _, c := range cases {
		err := CheckReply(c.self, c.peer)
		if c.bad != errors.Is(err, ErrUnreachableReply) {
			t.Errorf("CheckReply(%q, %q) = %v", c.self, c.peer, err)
		}
	}
}

func TestReplyHost(t *testing.T) {
	if h, err := ReplyHost("127.0.0.1:7000"); err != nil || h != "127.0.0.1" {
		t.Fatalf("ReplyHost(loopback) = %q, %v", h, err)
	}
	if _, err := ReplyHost("no-port"); err == nil {
		t.Fatal("ReplyHost without a port worked")
	}
}

// A wildcard bind never advertises the wildcard.
func TestStartRemoteWildcard(t *testing.T) {
	if _, _, err := RoutableHost(); err != nil {
		t.Skipf("no routable address here: %v", err)
	}
	sys := newSystem(t)
	r, addr, err := StartRemote(sys, "0.0.0.0:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(false)
	h, _ := splitHost(addr)
	if IsWildcard(h) || IsLoopback(h) {
		t.Fatalf("advertised %s", addr)
	}
}
