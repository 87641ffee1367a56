package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// status prints, for routes out and in, the backend and why it was chosen,
// in text and in JSON.
func TestStatusPrintsWhy(t *testing.T) {
	const whyOut = `shm: peer is not on this host: not supported; ibverbs: refused by the peer: handshake for backend "ibverbs", ours tcp: not supported`
	st := &rdmapb.StatusResponse{
		Backend: "shm+ibverbs+tcp",
		Routes:  []*rdmapb.RouteStatus{{PeerAddr: "10.0.0.2:8090/rdma-manager", PeerId: 2, Backend: "tcp", State: "up", Why: whyOut}},
		Inbound: []*rdmapb.RouteStatus{{PeerAddr: "127.0.0.1:4000", PeerId: 3, Backend: "shm", State: "up", Inbound: true, Why: "the peer's choice"}},
	}
	var out bytes.Buffer
	if err := printStatus(&env{stdout: &out}, st, false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"  10.0.0.2:8090/rdma-manager peer_id=0000000000000002 backend=tcp state=up ",
		` why="shm: peer is not on this host: not supported; ibverbs: refused by the peer: handshake for backend \"ibverbs\", ours tcp: not supported"` + "\n",
		"  127.0.0.1:4000 peer_id=0000000000000003 backend=shm state=up ",
		` why="the peer's choice"` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}

	out.Reset()
	if err := printStatus(&env{stdout: &out}, st, true); err != nil {
		t.Fatal(err)
	}
	var doc statusDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(doc.Routes) != 2 || doc.Routes[0].Direction != "out" || doc.Routes[0].Backend != "tcp" || doc.Routes[0].Why != whyOut ||
		doc.Routes[1].Direction != "in" || doc.Routes[1].Backend != "shm" || doc.Routes[1].Why != "the peer's choice" {
		t.Errorf("status --json routes: %+v", doc.Routes)
	}
	if !strings.Contains(out.String(), `"why":"the peer's choice"`) {
		t.Errorf("status --json has no \"why\" key:\n%s", out.String())
	}
}
