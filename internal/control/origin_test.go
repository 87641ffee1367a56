package control

import (
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
)

// The stamp overwrites whatever a peer wrote, and only stamped messages
// read as remote.
func TestStamp(t *testing.T) {
	e := &remote.MessageEnvelope{MessageHeader: &remote.MessageHeader{HeaderData: map[string]string{
		originHeader: "local", peerHeader: "127.0.0.1:1", "other": "kept",
	}}}
	Stamp(e, "10.0.0.5:9000")
	h := e.MessageHeader.HeaderData
	if h[originHeader] != originRemote || h[peerHeader] != "10.0.0.5:9000" || h["other"] != "kept" {
		t.Fatalf("stamped header %v", h)
	}
	bare := &remote.MessageEnvelope{}
	Stamp(bare, "10.0.0.6:1")
	if bare.MessageHeader.HeaderData[originHeader] != originRemote {
		t.Fatalf("stamp without a header: %v", bare.MessageHeader)
	}

	env := &protoactor.MessageEnvelope{Message: "x"}
	if IsRemote(env.Header) || IsRemote(nil) || Peer(nil) != "" {
		t.Fatal("an unstamped message reads as remote")
	}
	env.SetHeader(originHeader, "Remote")
	if IsRemote(env.Header) {
		t.Fatal("a header that only looks like the stamp reads as remote")
	}
	StampEnvelope(env, "10.0.0.7:2")
	if !IsRemote(env.Header) || Peer(env.Header) != "10.0.0.7:2" {
		t.Fatalf("stamped envelope: remote %v peer %q", IsRemote(env.Header), Peer(env.Header))
	}
}
