package agentwire

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
)

// Auth carries the version the process speaks: 2 or 3 decode as such,
// others are ErrVersion (an older agent's refusal the process falls back on).
func TestAuthVersions(t *testing.T) {
	for v := byte(0); v < 6; v++ {
		a := Auth{Version: MinVersion, PID: 1, ManagerID: 2, Addr: "x:1"}
		pkt, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		pkt[1] = v
		got, err := DecodeAuth(pkt)
		switch {
		case v >= MinVersion && v <= Version:
			if err != nil || got.Version != v {
				t.Errorf("auth of version %d: %+v, %v", v, got, err)
			}
		case !errors.Is(err, rdmamgr.ErrVersion):
			t.Errorf("auth of version %d: %v", v, err)
		}
	}
	if _, err := (&Auth{Version: Version + 1, PID: 1, ManagerID: 2, Addr: "x:1"}).Encode(); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Errorf("auth encoded of version %d: %v", Version+1, err)
	}
	h := Hello{AgentID: 1}
	pkt, _ := h.Encode()
	if pkt[1] != 2 {
		t.Errorf("hello of version %d: an older process refuses all but 2", pkt[1])
	}
}

// Ask and answer round-trip; a backend the protocol does not define, an
// empty or unprintable far agent, a short or long packet are ErrProtocol.
func TestAskAnswer(t *testing.T) {
	q := Ask{ID: 0xdeadbeef, Far: "10.0.0.2:7000"}
	pkt, err := q.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeAsk(pkt); err != nil || got != q {
		t.Fatalf("ask: %+v, %v", got, err)
	}
	for name, p := range map[string][]byte{"short": pkt[:len(pkt)-1], "long": append(pkt[:len(pkt):len(pkt)], 0),
		"empty far": {TypeAsk, 1, 0, 0, 0, 0}, "control": {TypeAsk, 1, 0, 0, 0, 2, 'a', '\n'}} {
		if _, err := DecodeAsk(p); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("ask %s: %v", name, err)
		}
	}
	for _, k := range []byte{AnswerUnknown, AnswerTCP, AnswerIBVerbs} {
		a := Answer{ID: 7, Backend: k}
		pkt, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeAnswer(pkt); err != nil || got != a {
			t.Fatalf("answer: %+v, %v", got, err)
		}
		if _, err := DecodeAnswer(pkt[:len(pkt)-1]); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("short answer: %v", err)
		}
	}
	if _, err := DecodeAnswer([]byte{TypeAnswer, 7, 0, 0, 0, 3}); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Errorf("answer of backend 3: %v", err)
	}
	if _, err := (&Answer{Backend: 3}).Encode(); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Errorf("answer encoded of backend 3: %v", err)
	}
}
