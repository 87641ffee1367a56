package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// codesWithoutSentinel are the wire codes that have no data-path sentinel.
var codesWithoutSentinel = map[rdmapb.Code]bool{
	rdmapb.Code_OK:              true,
	rdmapb.Code_UNKNOWN_MESSAGE: true,
	rdmapb.Code_UNKNOWN_PEER:    true,
	rdmapb.Code_WRONG_PEER:      true,
	rdmapb.Code_INTERNAL:        true,
	rdmapb.Code_NOT_LOCAL:       true, // control plane only: rdmamgr.ErrNotLocal
}

func allCodes() []rdmapb.Code {
	var cs []rdmapb.Code
	for v := range rdmapb.Code_name {
		cs = append(cs, rdmapb.Code(v))
	}
	return cs
}

func TestSentinelRoundTrip(t *testing.T) {
	seen := map[error]rdmapb.Code{}
	for _, c := range allCodes() {
		s := Sentinel(c)
		if codesWithoutSentinel[c] {
			if s != nil {
				t.Errorf("Sentinel(%v) = %v, want nil", c, s)
			}
			continue
		}
		if s == nil {
			t.Errorf("Sentinel(%v) = nil, want a sentinel", c)
			continue
		}
		if got := Code(s); got != c {
			t.Errorf("Code(Sentinel(%v)) = %v", c, got)
		}
		if got := Code(fmt.Errorf("op: %w", s)); got != c {
			t.Errorf("Code(wrapped Sentinel(%v)) = %v", c, got)
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("codes %v and %v share sentinel %v", prev, c, s)
		}
		seen[s] = c
	}
	if Sentinel(rdmapb.Code(999)) != nil {
		t.Errorf("Sentinel of an unknown code is not nil")
	}
}

func TestCode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want rdmapb.Code
	}{
		{"nil", nil, rdmapb.Code_OK},
		{"bad key", fmt.Errorf("x: %w", rdmamgr.ErrBadKey), rdmapb.Code_BAD_KEY},
		{"out of range", fmt.Errorf("x: %w", rdmamgr.ErrOutOfRange), rdmapb.Code_OUT_OF_RANGE},
		{"access", fmt.Errorf("x: %w", rdmamgr.ErrAccess), rdmapb.Code_ACCESS_DENIED},
		{"released", fmt.Errorf("x: %w", rdmamgr.ErrReleased), rdmapb.Code_RELEASED},
		{"invalid", fmt.Errorf("x: %w", rdmamgr.ErrInvalid), rdmapb.Code_INVALID_ARGUMENT},
		{"buffer exhausted", fmt.Errorf("x: %w", rdmamgr.ErrLimit), rdmapb.Code_RESOURCE_EXHAUSTED},
		{"backend limit", fmt.Errorf("x: %w", rdmamgr.ErrLimit), rdmapb.Code_RESOURCE_EXHAUSTED},
		{"buffer closed", fmt.Errorf("x: %w", rdmamgr.ErrClosed), rdmapb.Code_CLOSED},
		{"backend closed", fmt.Errorf("x: %w", rdmamgr.ErrClosed), rdmapb.Code_CLOSED},
		{"peer gone", fmt.Errorf("x: %w", rdmamgr.ErrPeerGone), rdmapb.Code_PEER_GONE},
		{"deadline", fmt.Errorf("x: %w", rdmamgr.ErrDeadline), rdmapb.Code_DEADLINE_EXCEEDED},
		{"context deadline", fmt.Errorf("release: %w", context.DeadlineExceeded), rdmapb.Code_DEADLINE_EXCEEDED},
		{"protocol", fmt.Errorf("x: %w", rdmamgr.ErrProtocol), rdmapb.Code_PROTOCOL},
		{"unauthenticated", fmt.Errorf("x: %w", rdmamgr.ErrUnauthenticated), rdmapb.Code_UNAUTHENTICATED},
		{"version", fmt.Errorf("x: %w", rdmamgr.ErrVersion), rdmapb.Code_VERSION_MISMATCH},
		{"doubly wrapped", fmt.Errorf("a: %w", fmt.Errorf("b: %w", rdmamgr.ErrBadKey)), rdmapb.Code_BAD_KEY},
		{"joined", errors.Join(errors.New("other"), rdmamgr.ErrAccess), rdmapb.Code_ACCESS_DENIED},
		{"not supported", fmt.Errorf("x: %w", rdmamgr.ErrNotSupported), rdmapb.Code_NOT_SUPPORTED},
		{"plain error", errors.New("boom"), rdmapb.Code_INTERNAL},
		{"unwrapped %v", fmt.Errorf("x: %v", rdmamgr.ErrBadKey), rdmapb.Code_INTERNAL},
	}
	for _, c := range cases {
		if got := Code(c.err); got != c.want {
			t.Errorf("%s: Code(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestCodeOfRegistryErrors maps the errors a real registry returns.
func TestCodeOfRegistryErrors(t *testing.T) {
	g := memreg.NewRegistry(1, buffer.Limits{MaxRegions: 1})
	defer g.Close(context.Background())
	b, err := g.Allocate(16, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	bad := b
	bad.Key[0] ^= 1
	long := b
	long.Length = 17

	_, err = g.AcquireLocal(bad)
	if c := Code(err); c != rdmapb.Code_BAD_KEY {
		t.Errorf("bad key: %v -> %v", err, c)
	}
	_, err = g.AcquireLocal(long)
	if c := Code(err); c != rdmapb.Code_OUT_OF_RANGE {
		t.Errorf("out of range: %v -> %v", err, c)
	}
	_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, OpWrite.Need())
	if c := Code(err); c != rdmapb.Code_ACCESS_DENIED {
		t.Errorf("access: %v -> %v", err, c)
	}
	_, err = g.Allocate(1, buffer.AccessRead)
	if c := Code(err); c != rdmapb.Code_RESOURCE_EXHAUSTED {
		t.Errorf("exhausted: %v -> %v", err, c)
	}
	if err := g.Release(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	_, err = g.AcquireLocal(b)
	if c := Code(err); c != rdmapb.Code_RELEASED {
		t.Errorf("released: %v -> %v", err, c)
	}
}

func TestRemoteError(t *testing.T) {
	for _, c := range allCodes() {
		if c == rdmapb.Code_OK {
			continue
		}
		var err error = &RemoteError{Code: c, Op: OpRead}
		wrapped := fmt.Errorf("get: %w", err)
		s := Sentinel(c)
		if got := errors.Unwrap(err); got != s {
			t.Errorf("%v: Unwrap = %v, want %v", c, got, s)
		}
		if s != nil {
			if !errors.Is(err, s) || !errors.Is(wrapped, s) {
				t.Errorf("%v: RemoteError is not its sentinel %v", c, s)
			}
			if got := Code(wrapped); got != c {
				t.Errorf("%v: Code(wrapped RemoteError) = %v", c, got)
			}
		} else if got := Code(err); got != rdmapb.Code_INTERNAL {
			t.Errorf("%v: Code of RemoteError without sentinel = %v, want INTERNAL", c, got)
		}
		var re *RemoteError
		if !errors.As(wrapped, &re) || re.Code != c || re.Op != OpRead {
			t.Errorf("%v: errors.As lost the RemoteError: %v", c, re)
		}
		if msg := err.Error(); !strings.Contains(msg, "read") || !strings.Contains(msg, c.String()) {
			t.Errorf("%v: message %q lacks op or code", c, msg)
		}
	}
	// A remote bad key is the same class as a local one.
	if !errors.Is(&RemoteError{Code: rdmapb.Code_BAD_KEY, Op: OpWrite}, rdmamgr.ErrBadKey) {
		t.Errorf("remote BAD_KEY is not rdmamgr.ErrBadKey")
	}
	if errors.Is(&RemoteError{Code: rdmapb.Code_BAD_KEY, Op: OpWrite}, rdmamgr.ErrAccess) {
		t.Errorf("remote BAD_KEY matches rdmamgr.ErrAccess")
	}
	// Remote peers hear one code for a wrong key and an unknown region;
	// the error matches both sentinels.
	if c := RemoteCode(fmt.Errorf("x: %w", rdmamgr.ErrBadKey)); c != rdmapb.Code_RELEASED {
		t.Errorf("RemoteCode(bad key) = %v, want RELEASED", c)
	}
	if c := RemoteCode(fmt.Errorf("x: %w", rdmamgr.ErrReleased)); c != rdmapb.Code_RELEASED {
		t.Errorf("RemoteCode(released) = %v, want RELEASED", c)
	}
	if c := RemoteCode(rdmamgr.ErrAccess); c != rdmapb.Code_ACCESS_DENIED {
		t.Errorf("RemoteCode(access) = %v", c)
	}
	rel := fmt.Errorf("put: %w", &RemoteError{Code: rdmapb.Code_RELEASED, Op: OpWrite})
	if !errors.Is(rel, rdmamgr.ErrReleased) || !errors.Is(rel, rdmamgr.ErrBadKey) || errors.Is(rel, rdmamgr.ErrAccess) {
		t.Errorf("remote RELEASED: Is(ErrReleased) %v, Is(ErrBadKey) %v, Is(ErrAccess) %v",
			errors.Is(rel, rdmamgr.ErrReleased), errors.Is(rel, rdmamgr.ErrBadKey), errors.Is(rel, rdmamgr.ErrAccess))
	}
	if c := Code(rel); c != rdmapb.Code_RELEASED {
		t.Errorf("Code(remote RELEASED) = %v", c)
	}
}

func TestOp(t *testing.T) {
	if OpWrite.String() != "write" || OpRead.String() != "read" || Op(0).String() != "op(?)" {
		t.Errorf("Op.String: %q %q %q", OpWrite, OpRead, Op(0))
	}
	if OpWrite.Need() != buffer.AccessWrite || OpRead.Need() != buffer.AccessRead {
		t.Errorf("Op.Need: write %v read %v", OpWrite.Need(), OpRead.Need())
	}
}
