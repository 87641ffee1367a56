package tcp

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestCopiedAnswersHoldNoRegion: a batch whose READ payloads are all
// copied into the stage (flushCopied) lets go of their regions before it
// is written, so a revocation made while the batch waits to be written
// (here, the hook between the copy and the write) returns at once, and
// the answers carry the bytes read before it. Before, the batch held its
// references through the write, under a deadline: the revocation waited
// for the write, which waited for the hook, until the revocation's ctx
// ran out.
func TestCopiedAnswersHoldNoRegion(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	h, mem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, mem)
	before := bytes.Clone(mem)
	revoked := make(chan error, 1)
	var once sync.Once
	hook := func(s *serverConn) {
		if s.payload == 0 {
			return // a heartbeat's answer, say: not the READs' batch
		}
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			revoked <- p.regB.Revoke(ctx, h)
		})
	}
	testHookGathered.Store(&hook)
	t.Cleanup(func() { testHookGathered.Store(nil) })
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	writeRaw(t, c, append(
		reqBytes(reqHeader{op: opRead, length: 8, wrid: 1, region: h.Region, offset: 16, key: h.Key}),
		reqBytes(reqHeader{op: opRead, length: 512, wrid: 2, region: h.Region, offset: 1024, key: h.Key})...))
	for _, want := range []struct {
		wrid   uint64
		off, n int
	}{{1, 16, 8}, {2, 1024, 512}} {
		expectReadAnswer(t, c, want.wrid, before[want.off:want.off+want.n])
	}
	if err := <-revoked; err != nil {
		t.Fatalf("Revoke while a copied batch waited to be written: %v", err)
	}
}
