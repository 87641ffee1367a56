package baseline

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr/bench"
)

// Load is what a client does: Count timed operations of Size bytes after
// Warmup untimed ones, over Conns connections (Stream, Pipeline) with
// Depth in flight (Pipeline). A Stream's operations cycle through Slots
// distinct buffers of Size bytes on each end (spread over the
// connections; at least one each): the memory ours moves with Slots
// operations in flight.
type Load struct {
	Size   uint64
	Count  int
	Warmup int
	Conns  int
	Depth  int
	Slots  int
}

// clientConns are a client's connections to a server, closed when ctx ends
// so no exchange outlives it.
type clientConns struct {
	conns []net.Conn
	stop  func() bool
}

func dial(ctx context.Context, addr string, n int) (*clientConns, error) {
	var d net.Dialer
	b := &clientConns{}
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("dial baseline server %s: %w", addr, err)
		}
		b.conns = append(b.conns, c)
	}
	b.stop = context.AfterFunc(ctx, b.abort)
	return b, nil
}

// abort closes every connection so the other exchanges of a phase fail
// instead of waiting for a peer that will not answer.
func (b *clientConns) abort() {
	for _, c := range b.conns {
		c.Close()
	}
}

func (b *clientConns) close() {
	if b.stop != nil {
		b.stop()
	}
	b.abort()
}

// phase runs n operations spread over the connections, each connection's
// share k by exchange(i, c, k) on a goroutine of its own, and returns the
// time it took. One failed exchange aborts the others.
func (b *clientConns) phase(ctx context.Context, n int, exchange func(i int, c net.Conn, k int) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(b.conns))
	t0 := time.Now()
	for i, c := range b.conns {
		k := share(n, len(b.conns), i)
		if k == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = exchange(i, c, k); errs[i] != nil {
				b.abort()
			}
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return d, errors.Join(errs...)
}

// share splits total over n parts as evenly as possible.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

// Stream moves l.Count operations of l.Size bytes over l.Conns connections
// (op "put": client to server; "get": server to client), after l.Warmup
// untimed ones, and returns the time of the timed phase.
func Stream(ctx context.Context, addr, op string, l Load) (time.Duration, error) {
	b, err := dial(ctx, addr, l.Conns)
	if err != nil {
		return 0, err
	}
	defer b.close()
	mode := byte(modePut)
	if op == "get" {
		mode = modeGet
	}
	bufs := make([][]byte, len(b.conns))
	slots := make([]int, len(b.conns))
	for i := range bufs {
		slots[i] = int(min(uint64(max(share(l.Slots, len(b.conns), i), 1)), MaxSize/max(l.Size, 1)))
		bufs[i] = make([]byte, l.Size*uint64(slots[i]))
		rand.Read(bufs[i])
	}
	exchange := func(i int, c net.Conn, k int) error { return streamConn(c, mode, bufs[i], l.Size, slots[i], k) }
	if l.Warmup > 0 {
		if _, err := b.phase(ctx, l.Warmup, exchange); err != nil {
			return 0, fmt.Errorf("baseline %s stream warm-up: %w", op, err)
		}
	}
	d, err := b.phase(ctx, l.Count, exchange)
	if err != nil {
		return 0, fmt.Errorf("baseline %s stream: %w", op, err)
	}
	return d, nil
}

// streamConn moves n operations of size bytes on c, from (put) or into
// (get) the slots of p in turn; the server uses as many slots.
func streamConn(c net.Conn, mode byte, p []byte, size uint64, slots, n int) error {
	if _, err := c.Write(header{mode: mode, slots: uint16(slots), size: size, count: uint64(n)}.encode()); err != nil {
		return err
	}
	if mode == modePut {
		for i := range n {
			if _, err := c.Write(slot(p, size, uint64(i))); err != nil {
				return err
			}
		}
		var ack [1]byte
		_, err := io.ReadFull(c, ack[:])
		return err
	}
	for i := range n {
		if _, err := io.ReadFull(c, slot(p, size, uint64(i))); err != nil {
			return err
		}
	}
	return nil
}

// PingPong does l.Count round trips of l.Size bytes, one at a time on one
// connection, after l.Warmup untimed ones; it returns the sorted
// latencies.
func PingPong(ctx context.Context, addr string, l Load) ([]time.Duration, error) {
	b, err := dial(ctx, addr, 1)
	if err != nil {
		return nil, err
	}
	defer b.close()
	pp := &pingPong{c: b.conns[0], req: make([]byte, l.Size), resp: make([]byte, l.Size)}
	rand.Read(pp.req)
	if l.Warmup > 0 {
		if err := pp.phase(l.Warmup, nil); err != nil {
			return nil, fmt.Errorf("baseline ping-pong warm-up: %w", errors.Join(ctx.Err(), err))
		}
	}
	lat := make([]time.Duration, l.Count)
	if err := pp.phase(l.Count, lat); err != nil {
		return nil, fmt.Errorf("baseline ping-pong: %w", errors.Join(ctx.Err(), err))
	}
	slices.Sort(lat)
	return lat, nil
}

type pingPong struct {
	c         net.Conn
	req, resp []byte
}

// phase does n round trips, timing each into lat if it is not nil.
func (pp *pingPong) phase(n int, lat []time.Duration) error {
	if _, err := pp.c.Write(header{mode: modeRR, size: uint64(len(pp.req)), count: uint64(n)}.encode()); err != nil {
		return err
	}
	clk := bench.LatencyClock() // the clock ours is timed with
	for i := range n {
		t0 := clk.Now()
		if _, err := pp.c.Write(pp.req); err != nil {
			return err
		}
		if _, err := io.ReadFull(pp.c, pp.resp); err != nil {
			return err
		}
		if lat != nil {
			lat[i] = clk.Since(t0)
		}
	}
	return nil
}

// Pipeline does l.Count request/response exchanges of l.Size bytes with
// l.Depth in flight, spread over l.Conns connections (at most l.Depth),
// after l.Warmup untimed ones; it returns the time of the timed phase.
func Pipeline(ctx context.Context, addr string, l Load) (time.Duration, error) {
	b, err := dial(ctx, addr, min(l.Conns, l.Depth))
	if err != nil {
		return 0, err
	}
	defer b.close()
	exchange := func(i int, c net.Conn, k int) error {
		return pipelineConn(c, l.Size, k, share(l.Depth, len(b.conns), i))
	}
	if l.Warmup > 0 {
		if _, err := b.phase(ctx, l.Warmup, exchange); err != nil {
			return 0, fmt.Errorf("baseline pipeline warm-up: %w", err)
		}
	}
	d, err := b.phase(ctx, l.Count, exchange)
	if err != nil {
		return 0, fmt.Errorf("baseline pipeline: %w", err)
	}
	return d, nil
}

// pipelineConn keeps up to window requests in flight on c: a writer
// buffers requests while the window has room and flushes before it has to
// wait; the reader takes replies and frees window slots.
func pipelineConn(c net.Conn, size uint64, n, window int) error {
	if _, err := c.Write(header{mode: modeRR, size: size, count: uint64(n)}.encode()); err != nil {
		return err
	}
	slots := make(chan struct{}, window)
	werr := make(chan error, 1)
	go func() { werr <- pipelineWriter(c, size, n, slots) }()
	br := bufio.NewReaderSize(c, 64<<10)
	resp := make([]byte, size)
	for range n {
		if _, err := io.ReadFull(br, resp); err != nil {
			// Unblock a writer waiting for a slot or in a write.
			c.Close()
			for {
				select {
				case <-slots:
				case werr := <-werr:
					return errors.Join(err, werr)
				}
			}
		}
		<-slots
	}
	return <-werr
}

// pipelineWriter writes n requests, taking a window slot for each and
// flushing when it has to wait for one.
func pipelineWriter(c net.Conn, size uint64, n int, slots chan<- struct{}) error {
	bw := bufio.NewWriterSize(c, 64<<10)
	req := make([]byte, size)
	for range n {
		select {
		case slots <- struct{}{}:
		default:
			if err := bw.Flush(); err != nil {
				return err
			}
			slots <- struct{}{}
		}
		if _, err := bw.Write(req); err != nil {
			return err
		}
	}
	return bw.Flush()
}
