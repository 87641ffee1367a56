package proc

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// readyWatcher is a child's stdout: it hands on the address of the first
// "ready ADDR" line, and everything to tee if set.
type readyWatcher struct {
	mu    sync.Mutex
	line  []byte // the line being read, until the ready line was seen
	sent  bool
	ready chan<- string // buffered (1)
	tee   io.Writer
}

func (w *readyWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tee != nil {
		_, _ = w.tee.Write(p)
	}
	if w.sent {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			if len(w.line) > 4096 {
				w.line = w.line[:0]
			}
			return len(p), nil
		}
		l := strings.TrimSpace(string(w.line[:i]))
		w.line = w.line[i+1:]
		if addr, ok := strings.CutPrefix(l, "ready "); ok {
			w.sent, w.line = true, nil
			w.ready <- strings.TrimSpace(addr)
			return len(p), nil
		}
	}
}

// Buffer collects a child's output: safe for the child's copier and the
// parent's reads at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
