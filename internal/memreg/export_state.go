package memreg

import (
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
)

// errNotExportable: the region cannot be handed to another process; its
// bytes must travel another way.
var errNotExportable = fmt.Errorf("region cannot be exported to another process: %w", rdmamgr.ErrNotSupported)

// exportState is a region's private memfd: the memfd its pages live in
// once it was exported (its own memfd, sealed; after a Revoke, the fresh
// one its pages moved to).
type exportState struct {
	mu     sync.Mutex // serialises ExportFD and unexport of the region
	fd     int        // the private memfd (-1: none yet)
	mem    []byte     // the owner's mapping of it: the region's pages
	off    uint64     // the region's offset in it
	passed bool       // an fd of it was handed out
}
