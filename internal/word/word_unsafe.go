package word

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
)

// At returns the 8-byte word at mem[off:off+8], which must lie in mem and
// be 8-byte aligned in memory (not only within mem); else ErrMisaligned
// or ErrOutOfRange.
func At(mem []byte, off uint64) (*atomic.Uint64, error) {
	if off > uint64(len(mem)) || uint64(len(mem))-off < 8 {
		return nil, fmt.Errorf("word at %d of %d bytes: %w", off, len(mem), rdmamgr.ErrOutOfRange)
	}
	p := unsafe.Pointer(&mem[off])
	if uintptr(p)%8 != 0 {
		return nil, fmt.Errorf("word at %p: %w", p, rdmamgr.ErrMisaligned)
	}
	return (*atomic.Uint64)(p), nil
}

// CompareAndSwap sets the word at mem[off:] to swap if it is compare and
// returns its old value.
func CompareAndSwap(mem []byte, off, compare, swap uint64) (uint64, error) {
	w, err := At(mem, off)
	if err != nil {
		return 0, err
	}
	for {
		old := w.Load()
		if old != compare {
			return old, nil
		}
		if w.CompareAndSwap(compare, swap) {
			return old, nil
		}
	}
}

// FetchAdd adds add to the word at mem[off:] and returns its old value.
func FetchAdd(mem []byte, off, add uint64) (uint64, error) {
	w, err := At(mem, off)
	if err != nil {
		return 0, err
	}
	return w.Add(add) - add, nil
}
