package ibverbs

import (
	"sync"
	"testing"
	"time"
)

func TestWsemFIFOAndAllOrNothing(t *testing.T) {
	s := newWsem(4)
	if !s.tryAcquire(3) {
		t.Fatal("tryAcquire(3) of 4")
	}
	got := make(chan int, 3)
	go func() { s.acquire(4, time.Time{}, nil, nil); got <- 4 }()
	waitWaiters(t, s, 1)
	// 1 unit is free, but the 4-unit waiter is first: a small request waits.
	if s.tryAcquire(1) {
		t.Fatal("tryAcquire jumped the queue")
	}
	go func() { s.acquire(1, time.Time{}, nil, nil); got <- 1 }()
	waitWaiters(t, s, 2)
	s.release(3)
	if g := <-got; g != 4 {
		t.Fatalf("granted %d first, want the 4-unit waiter", g)
	}
	select {
	case g := <-got:
		t.Fatalf("granted %d with no units free", g)
	case <-time.After(20 * time.Millisecond):
	}
	s.release(4)
	if g := <-got; g != 1 {
		t.Fatalf("granted %d", g)
	}
	s.release(1)
	if s.inUse() != 0 {
		t.Fatalf("in use %d", s.inUse())
	}
}

func TestWsemTimeoutAndDone(t *testing.T) {
	s := newWsem(2)
	s.tryAcquire(2)
	if why := s.acquire(1, time.Now().Add(10*time.Millisecond), nil, nil); why != semTimeout {
		t.Fatalf("acquire past deadline: %d", why)
	}
	done := make(chan struct{})
	go func() { time.Sleep(10 * time.Millisecond); close(done) }()
	cancel := make(chan struct{})
	close(cancel)
	if why := s.acquire(2, time.Time{}, nil, cancel); why != semCanceled {
		t.Fatalf("acquire with cancel closed: %d", why)
	}
	if why := s.acquire(2, time.Time{}, done, nil); why != semDone {
		t.Fatalf("acquire after done: %d", why)
	}
	// A waiter that gave up does not block the ones behind it.
	got := make(chan struct{})
	big := make(chan struct{})
	go func() { s.acquire(2, time.Time{}, big, nil) }()
	waitWaiters(t, s, 1)
	go func() { s.acquire(1, time.Time{}, nil, nil); close(got) }()
	waitWaiters(t, s, 2)
	s.release(1)
	close(big) // the 2-unit waiter leaves; the 1-unit one gets the free unit
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("waiter behind a departed one not granted")
	}
	s.release(2)
	if s.inUse() != 0 {
		t.Fatalf("in use %d", s.inUse())
	}
}

func TestWsemConcurrent(t *testing.T) {
	s := newWsem(8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := 0
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				n := 1 + (g+i)%8
				if s.acquire(n, time.Time{}, nil, nil) != semOK {
					t.Error("acquire failed")
					return
				}
				mu.Lock()
				held += n
				if held > 8 {
					t.Errorf("%d units held of 8", held)
				}
				held -= n
				mu.Unlock()
				s.release(n)
			}
		})
	}
	wg.Wait()
	if s.inUse() != 0 {
		t.Fatalf("in use %d", s.inUse())
	}
}

func waitWaiters(t *testing.T, s *wsem, n int) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		w := len(s.waiters)
		s.mu.Unlock()
		if w == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d waiters, want %d", w, n)
		}
		time.Sleep(time.Millisecond)
	}
}
