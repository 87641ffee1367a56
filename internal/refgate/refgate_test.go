package refgate

import (
	"sync"
	"testing"
	"time"
)

func drained(g *Gate) bool {
	select {
	case <-g.Drained():
		return true
	default:
		return false
	}
}

func TestEnterLeaveClose(t *testing.T) {
	var g Gate
	for range 2 {
		if !g.Enter() {
			t.Fatal("Enter of an open gate refused")
		}
	}
	if g.Users() != 2 || g.Closed() {
		t.Fatalf("users %d closed %v", g.Users(), g.Closed())
	}
	if !g.Close() {
		t.Fatal("first Close reported false")
	}
	if g.Close() {
		t.Fatal("second Close reported true")
	}
	if g.Enter() {
		t.Fatal("Enter of a closed gate let a user in")
	}
	if !g.Closed() || g.Users() != 2 || drained(&g) {
		t.Fatalf("closed %v users %d drained %v with two users in", g.Closed(), g.Users(), drained(&g))
	}
	g.Leave()
	if drained(&g) {
		t.Fatal("drained with one user in")
	}
	g.Leave()
	if !drained(&g) || g.Users() != 0 {
		t.Fatalf("not drained after the last Leave (users %d)", g.Users())
	}
}

func TestCloseEmptyDrainsAtOnce(t *testing.T) {
	var g Gate
	ch := g.Drained() // asked for before Close: the same channel closes
	g.Close()
	select {
	case <-ch:
	default:
		t.Fatal("an empty gate did not drain on Close")
	}
	if !drained(&g) {
		t.Fatal("Drained not closed")
	}
}

func TestLeaveWithoutEnterPanics(t *testing.T) {
	for _, closed := range []bool{false, true} {
		var g Gate
		if closed {
			g.Close()
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("closed=%v: Leave without Enter did not panic", closed)
				}
			}()
			g.Leave()
		}()
		if g.Users() != 0 || g.Closed() != closed {
			t.Errorf("closed=%v: a failed Leave changed the gate: users %d closed %v", closed, g.Users(), g.Closed())
		}
	}
	// The count survives the panic: the gate still works.
	var g Gate
	g.Enter()
	g.Close()
	g.Leave()
	if !drained(&g) {
		t.Error("not drained")
	}
}

// Many users race with Close: every user that got in is counted until it
// leaves, none gets in after Close, and Drained closes exactly when the
// last one is out.
func TestConcurrent(t *testing.T) {
	for round := 0; round < 50; round++ {
		var g Gate
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 200; i++ {
					if !g.Enter() {
						return
					}
					if drained(&g) {
						t.Error("drained while a user is in")
					}
					g.Leave()
				}
			}()
		}
		close(start)
		g.Close()
		select {
		case <-g.Drained():
		case <-time.After(10 * time.Second):
			t.Fatal("never drained")
		}
		if g.Enter() {
			t.Fatal("Enter after Drained")
		}
		wg.Wait()
		if g.Users() != 0 {
			t.Fatalf("users %d at the end", g.Users())
		}
	}
}

func BenchmarkEnterLeave(b *testing.B) {
	var g Gate
	b.ReportAllocs()
	for b.Loop() {
		g.Enter()
		g.Leave()
	}
}

// EnterN and LeaveN move the count by n at once, in any split with Enter
// and Leave; a closed gate lets n in no more, and LeaveN of more than are
// in panics, changing nothing.
func TestEnterNLeaveN(t *testing.T) {
	var g Gate
	if !g.EnterN(5) {
		t.Fatal("EnterN(5) on an open gate refused")
	}
	g.Leave()
	g.LeaveN(2)
	if got := g.Users(); got != 2 {
		t.Fatalf("users %d after EnterN(5), Leave, LeaveN(2), want 2", got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("LeaveN(3) with 2 in did not panic")
			}
		}()
		g.LeaveN(3)
	}()
	if got := g.Users(); got != 2 {
		t.Fatalf("users %d after the refused LeaveN, want 2", got)
	}
	g.Close()
	if g.EnterN(1) {
		t.Fatal("EnterN on a closed gate let users in")
	}
	if drained(&g) {
		t.Fatal("drained with 2 users in")
	}
	g.LeaveN(2)
	if !drained(&g) {
		t.Fatal("not drained once the last users left by LeaveN")
	}
}
