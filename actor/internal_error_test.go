package actor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Issue 24 row 12: internal error text went to peers. A remote caller now
// reads the code and a generic message; a local caller keeps the details;
// errors of the module's sentinels keep their text both ways.
func TestInternalErrorNotSentToPeers(t *testing.T) {
	internal := fmt.Errorf("shm slab: memfd_create /dev/shm/rdmamgr-7: %w", errors.New("too many open files"))
	e := fromErrorFor(true, internal)
	if e.Code != rdmapb.Code_INTERNAL || e.Message != internalMessage || strings.Contains(e.Message, "/dev/shm") {
		t.Fatalf("remote caller got %v %q", e.Code, e.Message)
	}
	if e := fromErrorFor(false, internal); e.Message != internal.Error() {
		t.Fatalf("local caller got %q, want the details", e.Message)
	}
	limit := fmt.Errorf("more than 4 buffers (serve --max-remote): %w", rdmamgr.ErrLimit)
	if e := fromErrorFor(true, limit); e.Code != rdmapb.Code_RESOURCE_EXHAUSTED || e.Message != limit.Error() {
		t.Fatalf("remote caller of a limit got %v %q", e.Code, e.Message)
	}
}
