package actor

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
)

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
		err := checkReply(c.self, c.peer)
		if c.bad != errors.Is(err, rdmamgr.ErrUnreachableReply) {
			t.Errorf("checkReply(%q, %q) = %v", c.self, c.peer, err)
		}
	}
}

func TestReplyHost(t *testing.T) {
	if h, err := replyHost("127.0.0.1:7000"); err != nil || h != "127.0.0.1" {
		t.Fatalf("replyHost(loopback) = %q, %v", h, err)
	}
	if _, err := replyHost("no-port"); err == nil {
		t.Fatal("replyHost without a port worked")
	}
}
