package tcp

import "net"

// stage is a writer's buffer for the small parts of a batch (client.go,
// stageCopyMax): headers and small payloads are copied in one after
// another, and each run of them becomes one buffer of the writev. Owned
// by whoever holds the connection's wmu; reset at the start of a batch,
// which must not hold more than maxWriteBatch frames.
type stage struct {
	buf    [maxWriteBatch*reqMaxSize + stageCopyBudget]byte
	used   int // bytes of buf the batch holds
	open   int // start of the bytes not yet cut into the iov
	copied int // payload bytes copied in (at most stageCopyBudget)
}

func (s *stage) reset() { s.used, s.open, s.copied = 0, 0, 0 }

// take returns the next n bytes of the stage (a header, at most
// reqMaxSize; the batch's frames bound them).
func (s *stage) take(n int) []byte {
	b := s.buf[s.used : s.used+n : s.used+n]
	s.used += n
	return b
}

// copyIn copies p after the staged bytes and reports true, or reports
// false (nothing copied) when p is over stageCopyMax or the batch's
// budget is spent.
func (s *stage) copyIn(p []byte) bool {
	if len(p) > stageCopyMax || s.copied+len(p) > stageCopyBudget {
		return false
	}
	s.copied += len(p)
	s.used += copy(s.buf[s.used:], p)
	return true
}

// cut appends the staged bytes not yet in iov to it as one buffer.
func (s *stage) cut(iov net.Buffers) net.Buffers {
	if s.open < s.used {
		iov = append(iov, s.buf[s.open:s.used:s.used])
		s.open = s.used
	}
	return iov
}

// loan appends the staged bytes, then p, which the writev reads in place.
func (s *stage) loan(iov net.Buffers, p []byte) net.Buffers {
	return append(s.cut(iov), p)
}
