//go:build linux

package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// atkAuthConn sets up a route by hand (handshake and hello) and returns
// its one authenticated data connection.
func atkAuthConn(t *testing.T, ctx context.Context, v *atkVictim) (net.Conn, error) {
	t.Helper()
	addr, toks, err := rawRoute(ctx, v.d, 1)
	if err != nil {
		return nil, fmt.Errorf("route handshake: %w", err)
	}
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := hello(c, wireVersion, toks[0]); err != nil {
		c.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	return c, nil
}

// atkRawPutGet writes p into the victim's buffer b over c, reads it back
// and compares.
func atkRawPutGet(c net.Conn, b buffer.Buffer, wrid uint64, p []byte) error {
	if _, err := c.Write(append(frame(opWrite, uint32(len(p)), wrid, b.Region, 0, b.Key), p...)); err != nil {
		return err
	}
	if _, err := response(c, opWrite, wrid); err != nil {
		return err
	}
	if _, err := c.Write(frame(opRead, uint32(len(p)), wrid+1, b.Region, 0, b.Key)); err != nil {
		return err
	}
	got, err := response(c, opRead, wrid+1)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, p) {
		return fmt.Errorf("raw read back: %s", firstDiff(got, p))
	}
	return nil
}

// (a) The victim runs out of file descriptors (idle connections to its
// gRPC port) while a connection waits at its data port: Accept fails with
// EMFILE. The data listener must survive: once the idle connections go,
// the waiting connection is served and new routes work.
func TestAttackDataFDExhaustion(t *testing.T) {
	const nofile = 200
	v := atkStart(t, nofile)
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	start := time.Now()

	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	exhausted := false
	for i := 0; i < 2*nofile && !exhausted; i++ { // bounded: at most 400 connections
		c, err := net.DialTimeout("tcp", v.d.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial the gRPC port: %v", err)
		}
		idle = append(idle, c)
		if i < nofile/2 || i%10 != 9 {
			continue
		}
		// Let the victim's gRPC server accept what is queued.
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) && !exhausted {
			if s, err := v.sample(); err == nil && s.fds >= nofile {
				exhausted = true
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !exhausted {
		s, _ := v.sample()
		t.Fatalf("victim not out of fds after %d idle connections: %v", len(idle), s)
	}
	// One connection to the data port: the victim's Accept hits EMFILE.
	waiting, err := net.DialTimeout("tcp", v.dataAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial the data port: %v", err)
	}
	defer waiting.Close()
	// The route set up before goes on working.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	l.bench(ctx, 100000)
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(v.d.stderr.String(), "accept failed; retrying") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s := v.d.stderr.String(); !strings.Contains(s, "accept failed; retrying") || !strings.Contains(s, "too many open files") {
		t.Errorf("the victim did not log an EMFILE accept retry:\n%s", s)
	}
	peak := v.peakSample()

	for _, c := range idle {
		c.Close()
	}
	idle = nil
	// The listener is back: the waiting connection gets its challenge,
	// and a new route moves verified bytes.
	_ = waiting.SetDeadline(time.Now().Add(30 * time.Second))
	if err := challenge(waiting); err != nil {
		t.Fatalf("the data listener did not come back: %v", err)
	}
	c, err := atkAuthConn(t, testCtx(t, 30*time.Second), v)
	if err != nil {
		t.Fatalf("new route after the attack: %v", err)
	}
	defer c.Close()
	if err := atkRawPutGet(c, l.remote, 1, bytes.Repeat([]byte{0xA5}, atkOpSize)); err != nil {
		t.Fatalf("verified put/get on a new route after the attack: %v", err)
	}
	c.Close()
	waiting.Close()
	if err := l.putGet(0x33); err != nil {
		t.Fatalf("legitimate put/get after the attack: %v", err)
	}
	l.ops.Add(1)
	after := v.settle(t, base)
	atkNothingGranted(t, v, 1)
	l.report(t, "a fd-exhaustion", base, peak, after, time.Since(start))
}

// (b) Hundreds of silent connections to the data port from four source
// addresses, reconnecting as they are closed, while a legitimate client
// sets up new routes (its own address) and runs a verified bench on its
// route.
func TestAttackDataSilentFlood(t *testing.T) {
	const (
		perAddr  = 75 // 300 silent connections at once at most
		maxDials = 20000
		attackT  = 8 * time.Second
	)
	v := atkStart(t, 0)
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	authBefore := atkAuthFailures(t, v)
	raw := remoteBuffer(t, v.d, 4096, buffer.AccessReadWrite) // the new routes' own
	start := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), attackT)
	defer cancel()
	var dials, served atomic.Int64
	var wg sync.WaitGroup
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
		for range perAddr {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil && dials.Add(1) <= maxDials {
					c, err := d.DialContext(ctx, "tcp", v.dataAddr)
					if err != nil {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					stop := context.AfterFunc(ctx, func() { c.Close() })
					_ = c.SetDeadline(time.Now().Add(attackT))
					n, _ := io.Copy(io.Discard, c) // until the victim closes it
					if n > 0 {
						served.Add(1)
					} else {
						time.Sleep(20 * time.Millisecond) // refused at once
					}
					stop()
					c.Close()
				}
			}()
		}
	}
	// Alongside: a verified bench on the legitimate route, and new routes.
	var newRoutes, newRouteErrs atomic.Int64
	var firstRouteErr atomic.Pointer[error]
	wg.Add(2)
	go func() { defer wg.Done(); l.bench(ctx, 100000) }()
	go func() {
		defer wg.Done()
		time.Sleep(500 * time.Millisecond)
		for i := 0; i < 20 && ctx.Err() == nil; i++ {
			c, err := atkAuthConn(t, ctx, v)
			if err == nil {
				err = atkRawPutGet(c, raw, uint64(10+2*i), bytes.Repeat([]byte{byte(i)}, 4096))
				c.Close()
			}
			if err != nil && ctx.Err() == nil {
				newRouteErrs.Add(1)
				firstRouteErr.CompareAndSwap(nil, &err)
			} else if err == nil {
				newRoutes.Add(1)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	wg.Wait()
	peak := v.peakSample()
	t.Logf("silent connections: %d dials, %d got a challenge; new legitimate routes: %d ok, %d failed",
		min(dials.Load(), maxDials), served.Load(), newRoutes.Load(), newRouteErrs.Load())
	if e := firstRouteErr.Load(); e != nil {
		t.Errorf("a new legitimate route failed during the flood: %v", *e)
	}
	if newRoutes.Load() == 0 {
		t.Errorf("no new legitimate route during the flood")
	}
	if atkAuthFailures(t, v) == authBefore {
		t.Errorf("the victim counted no refused connection")
	}
	after := v.settle(t, base)
	atkNothingGranted(t, v, 2)
	l.report(t, "b silent-flood", base, peak, after, time.Since(start))
}

func atkAuthFailures(t *testing.T, v *atkVictim) uint64 {
	t.Helper()
	st, err := v.d.client().Status(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st.AuthFailures
}
