package word

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
)

func TestWord(t *testing.T) {
	buf := make([]uint64, 4)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 32)
	if old, err := CompareAndSwap(mem, 8, 0, 7); err != nil || old != 0 || buf[1] != 7 {
		t.Fatalf("CAS 0→7: old %d err %v word %d", old, err, buf[1])
	}
	if old, err := CompareAndSwap(mem, 8, 0, 9); err != nil || old != 7 || buf[1] != 7 {
		t.Fatalf("CAS with a stale compare: old %d err %v word %d", old, err, buf[1])
	}
	if old, err := FetchAdd(mem, 8, 5); err != nil || old != 7 || buf[1] != 12 {
		t.Fatalf("FetchAdd: old %d err %v word %d", old, err, buf[1])
	}
	for _, off := range []uint64{4, 1} {
		if _, err := FetchAdd(mem, off, 1); !errors.Is(err, rdmamgr.ErrMisaligned) {
			t.Errorf("offset %d: %v, want ErrMisaligned", off, err)
		}
	}
	if _, err := FetchAdd(mem[4:], 0, 1); !errors.Is(err, rdmamgr.ErrMisaligned) {
		t.Errorf("unaligned base: %v, want ErrMisaligned", err)
	}
	for _, off := range []uint64{32, 28, 1 << 63} {
		if _, err := FetchAdd(mem, off, 1); !errors.Is(err, rdmamgr.ErrOutOfRange) {
			t.Errorf("offset %d: %v, want ErrOutOfRange", off, err)
		}
	}
}

// The owner's sync/atomic and FetchAdd agree: the sum is exact.
func TestAgreesWithSyncAtomic(t *testing.T) {
	buf := make([]uint64, 1)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 8)
	var wg sync.WaitGroup
	const n = 10000
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range n {
			atomic.AddUint64(&buf[0], 1)
		}
	}()
	go func() {
		defer wg.Done()
		for range n {
			if _, err := FetchAdd(mem, 0, 1); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	if got := atomic.LoadUint64(&buf[0]); got != 2*n {
		t.Fatalf("sum %d, want %d", got, 2*n)
	}
}
