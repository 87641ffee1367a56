package tcp

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// chunkSource hands out its data at most max bytes per Read, as a socket
// does with what has arrived; it counts the reads.
type chunkSource struct {
	data  []byte
	max   int
	reads int
}

func (s *chunkSource) Read(p []byte) (int, error) {
	s.reads++
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), s.max, len(s.data))
	copy(p, s.data[:n])
	s.data = s.data[n:]
	return n, nil
}

func pattern(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return p
}

// TestConnReaderBurst: a burst (reads that fill the small buffer) moves
// the reader to the large buffer, so one read takes in many frames; every
// byte comes out in order.
func TestConnReaderBurst(t *testing.T) {
	want := pattern(1 << 20)
	src := &chunkSource{data: want, max: 1 << 20}
	cr := newConnReader(src)
	var got bytes.Buffer
	frame := make([]byte, 100)
	for {
		n, err := io.ReadFull(cr, frame)
		got.Write(frame[:n])
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("bytes out differ from bytes in")
	}
	if cr.large == nil {
		t.Fatal("a burst of full reads did not move the reader to the large buffer")
	}
	// 1 MiB in 100-byte frames: the small buffer alone would take 256 reads.
	if max := (1<<20)/largeReadBuf + 4; src.reads > max {
		t.Fatalf("%d reads for 1 MiB of small frames, want at most %d", src.reads, max)
	}
	cr.close()
	if cr.large != nil {
		t.Fatal("close kept the large buffer")
	}
}

// TestConnReaderQuiet: after quietReads small reads the large buffer goes
// back to the pool; the small one serves what follows.
func TestConnReaderQuiet(t *testing.T) {
	src := &chunkSource{data: pattern(smallReadBuf * 4), max: 1 << 20}
	cr := newConnReader(src)
	buf := make([]byte, smallReadBuf*4)
	if _, err := io.ReadFull(cr, buf[:10]); err != nil {
		t.Fatal(err)
	}
	if cr.large != nil {
		t.Fatal("the first read used the large buffer")
	}
	if _, err := io.ReadFull(cr, buf[10:]); err != nil {
		t.Fatal(err)
	}
	// The small buffer was filled: the next fill is into the large one.
	src.data, src.max = pattern(quietReads*40), 10
	if _, err := io.ReadFull(cr, buf[:1]); err != nil {
		t.Fatal(err)
	}
	if cr.large == nil {
		t.Fatal("a full read did not move the reader to the large buffer")
	}
	for i := 0; i < 2*quietReads && cr.large != nil; i++ {
		if _, err := io.ReadFull(cr, buf[:10]); err != nil {
			t.Fatal(err)
		}
	}
	if cr.large != nil {
		t.Fatalf("still on the large buffer after %d small reads", 2*quietReads)
	}
}

// TestConnReaderBypass: a read into an empty buffer for at least the
// buffer's size goes straight into the destination, and ReadByte and
// Buffered agree with bufio's.
func TestConnReaderBypass(t *testing.T) {
	want := pattern(3 * smallReadBuf)
	src := &chunkSource{data: want, max: 1 << 20}
	cr := newConnReader(src)
	b, err := cr.ReadByte()
	if err != nil || b != want[0] {
		t.Fatalf("ReadByte = %d, %v; want %d", b, err, want[0])
	}
	if got := cr.Buffered(); got != smallReadBuf-1 {
		t.Fatalf("Buffered = %d after one byte of a full fill, want %d", got, smallReadBuf-1)
	}
	rest := make([]byte, len(want)-1)
	if _, err := io.ReadFull(cr, rest); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rest, want[1:]) {
		t.Fatal("bytes out differ from bytes in")
	}
	if _, err := cr.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read past the end: %v, want EOF", err)
	}
}

// TestConnReaderBulk: frames of a 16-byte header and a bulkMin payload (a
// stream of Get answers), headers read with io.ReadFull and payloads with
// ReadBulk. After the first frame, at most smallReadBuf of a payload comes
// through the buffer (is copied twice); the rest lands straight in its
// memory, also when the source hands each frame over in 64 KiB reads, the
// last short (loopback's MSS). Before ReadBulk the payloads came through
// Read and a header's fill took up to 64 KiB of the payload behind it
// (this test then fails: ReadBulk as Read).
func TestConnReaderBulk(t *testing.T) {
	const frames, hdr, size = 8, 16, bulkMin
	for _, max := range []int{1 << 30, 65483} {
		want := pattern(frames * (hdr + size))
		src := &chunkSource{data: want, max: max}
		cr := newConnReader(src)
		cr.quiet = 0 // busy: the large buffer
		var got bytes.Buffer
		h := make([]byte, hdr)
		p := make([]byte, size)
		for f := range frames {
			if _, err := io.ReadFull(cr, h); err != nil {
				t.Fatal(err)
			}
			if b := cr.Buffered(); f > 0 && b > smallReadBuf-hdr {
				t.Fatalf("source hands over %d: %d bytes of frame %d's payload buffered behind its header, want at most %d", max, b, f, smallReadBuf-hdr)
			}
			for n := 0; n < size; {
				k, err := cr.ReadBulk(p[n:])
				n += k
				if err != nil {
					t.Fatal(err)
				}
			}
			got.Write(h)
			got.Write(p)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("source hands over %d: bytes out differ from bytes in", max)
		}
		cr.close()
	}
}
