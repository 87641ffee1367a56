package rdmamgr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
)

var all = map[string]error{
	"ErrBadKey": ErrBadKey, "ErrOutOfRange": ErrOutOfRange, "ErrAccess": ErrAccess,
	"ErrReleased": ErrReleased, "ErrInvalid": ErrInvalid, "ErrLimit": ErrLimit,
	"ErrExpired": ErrExpired, "ErrRevoked": ErrRevoked, "ErrClosed": ErrClosed,
	"ErrWrongPeer": ErrWrongPeer, "ErrLengthMismatch": ErrLengthMismatch, "ErrNotLocal": ErrNotLocal,
	"ErrPeerGone": ErrPeerGone, "ErrDeadline": ErrDeadline, "ErrProtocol": ErrProtocol,
	"ErrUnauthenticated": ErrUnauthenticated, "ErrVersion": ErrVersion,
	"ErrNotSupported": ErrNotSupported, "ErrNotStarted": ErrNotStarted,
	"ErrUnknownMessage": ErrUnknownMessage, "ErrUnknownPeer": ErrUnknownPeer, "ErrTimeout": ErrTimeout,
	"ErrMessageTooLarge": ErrMessageTooLarge, "ErrBadResponse": ErrBadResponse,
	"ErrUnreachableReply": ErrUnreachableReply,
	"ErrNoReceive":        ErrNoReceive, "ErrReceiveTooSmall": ErrReceiveTooSmall, "ErrMisaligned": ErrMisaligned,
}

// One sentinel per meaning: no two match each other, and no two read alike.
func TestSentinelsDistinct(t *testing.T) {
	texts := map[string]string{}
	for name, err := range all {
		if err == nil || err.Error() == "" {
			t.Errorf("%s is empty", name)
			continue
		}
		if other, dup := texts[err.Error()]; dup {
			t.Errorf("%s and %s both read %q", name, other, err)
		}
		texts[err.Error()] = name
		for other, e := range all {
			if other != name && errors.Is(err, e) {
				t.Errorf("%s matches %s", name, other)
			}
		}
	}
}

func TestDeadline(t *testing.T) {
	err := fmt.Errorf("put: %w", ErrDeadline)
	if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not match ErrDeadline and context.DeadlineExceeded", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal("ErrDeadline matches context.Canceled")
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatal("ErrDeadline is not a timeout net.Error")
	}
}
