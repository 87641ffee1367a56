package agentwire

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// Ask asks the agent which backend its route to a far agent runs on
// (P → agent, version 3): P shows it in its route's reason. The agent
// sets the route up if it has none, bounded, and answers with the same ID.
type Ask struct {
	ID  uint32
	Far string // the far agent's actor address, not empty
}

// Answer is the agent's answer to an ask (agent → P, version 3).
type Answer struct {
	ID      uint32
	Backend byte // AnswerUnknown, AnswerTCP or AnswerIBVerbs
}

// Answer's backends: the agent could not tell (its route is not set up),
// or the backend of its route to the far agent.
const (
	AnswerUnknown = 0
	AnswerTCP     = 1
	AnswerIBVerbs = 2
)

// Encode returns the packet; it fails on a field DecodeAsk would refuse.
func (a *Ask) Encode() ([]byte, error) {
	if a.Far == "" {
		return nil, fmt.Errorf("agentwire: ask without far agent: %w", rdmamgr.ErrProtocol)
	}
	if err := checkText("far agent", a.Far, MaxAddr); err != nil {
		return nil, err
	}
	b := []byte{TypeAsk}
	b = binary.LittleEndian.AppendUint32(b, a.ID)
	return appendStr(b, a.Far), nil
}

// DecodeAsk checks and decodes an ask packet.
func DecodeAsk(pkt []byte) (Ask, error) {
	var a Ask
	d := newDecoder(pkt)
	d.head(TypeAsk)
	a.ID = d.U32()
	a.Far = d.str("far agent")
	if err := d.end(); err != nil {
		return Ask{}, err
	}
	if a.Far == "" {
		return Ask{}, fmt.Errorf("agentwire: ask without far agent: %w", rdmamgr.ErrProtocol)
	}
	return a, nil
}

// Encode returns the packet; it fails on a backend DecodeAnswer would refuse.
func (a *Answer) Encode() ([]byte, error) {
	if a.Backend > AnswerIBVerbs {
		return nil, fmt.Errorf("agentwire: answer's backend %d: %w", a.Backend, rdmamgr.ErrProtocol)
	}
	b := []byte{TypeAnswer}
	b = binary.LittleEndian.AppendUint32(b, a.ID)
	return append(b, a.Backend), nil
}

// DecodeAnswer checks and decodes an answer packet.
func DecodeAnswer(pkt []byte) (Answer, error) {
	var a Answer
	d := newDecoder(pkt)
	d.head(TypeAnswer)
	a.ID = d.U32()
	a.Backend = d.U8()
	if d.Err == nil && a.Backend > AnswerIBVerbs {
		d.fail("answer's backend %d", a.Backend)
	}
	if err := d.end(); err != nil {
		return Answer{}, err
	}
	return a, nil
}
