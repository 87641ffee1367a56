package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestWriteIOVOneBuffer: a batch of one buffer, written with write, is
// consumed from v as WriteTo consumes it: all of it, or (cut short by a
// deadline) the part written, the rest left in v to go on with.
func TestWriteIOVOneBuffer(t *testing.T) {
	a, b := loopbackPair(t)
	for _, c := range []net.Conn{a, b} { // small buffers: the write cannot fit in them, however the host tunes TCP
		_ = c.(*net.TCPConn).SetWriteBuffer(64 << 10)
		_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	v := net.Buffers{data}
	if err := a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := writeIOV(a, &v)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that does not read: n %d err %v, want a deadline", n, err)
	}
	if n <= 0 || n >= int64(len(data)) || len(v) != 1 || len(v[0]) != len(data)-int(n) || &v[0][0] != &data[n] {
		t.Fatalf("cut short after %d bytes: v holds %d buffers, the first %d bytes, want the rest of data", n, len(v), len(v[0]))
	}
	got := make(chan []byte, 1)
	go func() {
		p, _ := io.ReadAll(io.LimitReader(b, int64(len(data))))
		got <- p
	}()
	if err := a.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	m, err := writeIOV(a, &v)
	if err != nil || n+m != int64(len(data)) || len(v) != 0 {
		t.Fatalf("the rest: %d bytes, err %v, %d buffers left; want %d, nil, 0", m, err, len(v), int64(len(data))-n)
	}
	if p := <-got; !bytes.Equal(p, data) {
		t.Fatalf("the peer read %d bytes, not the buffer's %d", len(p), len(data))
	}
}

// TestWriteIOVBuffers: several buffers go as writev, whole and in order.
func TestWriteIOVBuffers(t *testing.T) {
	a, b := loopbackPair(t)
	v := net.Buffers{[]byte("head"), []byte("-payload-"), []byte("tail")}
	n, err := writeIOV(a, &v)
	if err != nil || n != 17 || len(v) != 0 {
		t.Fatalf("writeIOV: %d, %v, %d buffers left", n, err, len(v))
	}
	p := make([]byte, 17)
	if _, err := io.ReadFull(b, p); err != nil || string(p) != "head-payload-tail" {
		t.Fatalf("read %q, %v", p, err)
	}
}

// BenchmarkWriteOneBuffer: a ping-pong of 24-byte messages over loopback
// (one goroutine at each end), each message sent with write or as a
// writev of one iovec. Run with GOMAXPROCS=1 on one CPU (taskset) to see
// the system calls' own cost: on the 2-core VM writev's round trip is
// 1-2 µs longer (20-21 against 21-23 µs).
func BenchmarkWriteOneBuffer(b *testing.B) {
	for _, vec := range []bool{false, true} {
		name := "write"
		if vec {
			name = "writev"
		}
		b.Run(name, func(b *testing.B) {
			c, s := loopbackPair(b)
			send := func(c net.Conn, p []byte) error {
				if vec {
					v := net.Buffers{p}
					_, err := v.WriteTo(c)
					return err
				}
				_, err := c.Write(p)
				return err
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				p := make([]byte, 24)
				for {
					if _, err := io.ReadFull(s, p); err != nil {
						return
					}
					if send(s, p) != nil {
						return
					}
				}
			}()
			p := make([]byte, 24)
			for b.Loop() {
				if err := send(c, p); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, p); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			<-done
		})
	}
}
