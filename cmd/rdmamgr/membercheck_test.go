package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/internal/etcdtest"
	"github.com/rdmamgr/rdmamgr/membership"
)

// memberCheck accepts the agent address of a member (with or without the
// manager's name) and refuses any other with ErrUnknownPeer.
func TestMemberCheck(t *testing.T) {
	ep := etcdtest.Start(t)
	reg, err := membership.Open(membership.Config{Endpoints: []string{ep}, Cluster: "mc"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range []membership.Member{{Name: "a", Address: "10.0.0.1:7000", Manager: actor.DefaultName}, {Name: "b", Address: "10.0.0.2:7000", Manager: "agentB"}} {
		g, err := reg.Register(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
	}
	check := memberCheck(reg)
	for addr, ok := range map[string]bool{
		"10.0.0.1:7000": true, "10.0.0.2:7000/agentB": true,
		"10.0.0.2:7000": false, "10.0.0.1:7000/other": false, "10.0.0.3:7000": false, "127.0.0.1:22": false,
	} {
		err := check(ctx, addr)
		if ok && err != nil || !ok && !errors.Is(err, rdmamgr.ErrUnknownPeer) {
			t.Errorf("check(%s) = %v, want member %v", addr, err, ok)
		}
	}
}
