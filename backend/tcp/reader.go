package tcp

import (
	"io"
	"sync"
)

// Read buffers. A connection reads through a small buffer while its
// traffic is light and through a large one, borrowed from a pool, while
// frames arrive faster than it serves them: one read then takes in a whole
// batch of small frames (and their answers go out together), where the
// small buffer would cost a read per frame. An idle connection holds only
// the small buffer, so a thousand idle routes stay cheap. A read at least
// as large as the buffer, into an empty buffer, bypasses it (a payload
// lands straight in its memory).
//
// Bulk payloads (ReadBulk, for a payload of at least bulkMin bytes) land
// straight in their memory whenever the buffer is empty and at least
// smallReadBuf of them is left, and the fill that follows one (which
// takes the next header) reads at most smallReadBuf: the next payload
// then lands straight too, where a full fill would take up to 64 KiB of
// it into the buffer and copy it out again (a 1 MiB Get's first 64 KiB,
// and its tail with the next one's head). Below bulkMin the extra read
// per payload costs about what the copy saves (64 KiB Gets: the copy out
// of the buffer left the profile, CPU per operation did not fall).
const (
	smallReadBuf = 4 << 10
	largeReadBuf = 64 << 10
	bulkMin      = 2 * largeReadBuf
	// quietReads is how many reads in a row that each returned less than
	// the small buffer end a burst.
	quietReads = 64
)

var largeBufs = sync.Pool{New: func() any { return new([largeReadBuf]byte) }}

// connReader is a connection's buffered reader (as bufio.Reader, with a
// buffer that grows for a burst and shrinks after it). Used by the one
// goroutine that reads the connection.
type connReader struct {
	src   io.Reader
	small []byte
	large *[largeReadBuf]byte // borrowed while the connection is busy
	buf   []byte              // small or large[:]
	r, w  int                 // buf[r:w] is buffered
	quiet int                 // reads in a row that returned less than smallReadBuf
	// short: the next fill ends a bulk payload, or follows one that
	// ended straight in its memory: it reads at most smallReadBuf.
	short bool
}

func newConnReader(src io.Reader) *connReader {
	cr := &connReader{src: src, small: make([]byte, smallReadBuf), quiet: quietReads}
	cr.buf = cr.small
	return cr
}

// Buffered is the number of bytes that can be read without a read from the
// connection.
func (cr *connReader) Buffered() int { return cr.w - cr.r }

// bufferedHeader reports whether a whole response header is buffered, so
// that reading it takes no system call.
func (cr *connReader) bufferedHeader() bool {
	return cr.w-cr.r >= respHeaderSize && cr.w-cr.r >= respSize(cr.buf[cr.r]&^respFlag)
}

// Read reads into p: from the buffer when it holds anything, else straight
// from the connection when p is at least as large as the buffer, else
// through one fill of the buffer.
func (cr *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if cr.r == cr.w {
		if len(p) >= len(cr.buf) {
			n, err := cr.src.Read(p)
			cr.note(n)
			return n, err
		}
		if err := cr.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, cr.buf[cr.r:cr.w])
	cr.r += n
	return n, nil
}

// ReadFull is io.ReadFull(cr, p) (cr's own: no interface call), copying
// p at once when the buffer holds all of it, as it does for most
// headers and small payloads.
func (cr *connReader) ReadFull(p []byte) (int, error) {
	if cr.w-cr.r >= len(p) {
		n := copy(p, cr.buf[cr.r:cr.w])
		cr.r += n
		return n, nil
	}
	return readFull(cr, p)
}

// ReadBulk reads into p, the rest of a payload of at least bulkMin bytes
// (p ends where the payload does): from the buffer when it holds
// anything, else straight from the connection unless less than
// smallReadBuf is left; that tail comes through a fill of at most
// smallReadBuf, which takes the next header too (a socket often hands a
// payload over in two reads, the second short).
func (cr *connReader) ReadBulk(p []byte) (int, error) {
	if cr.r < cr.w {
		return cr.Read(p)
	}
	if len(p) < smallReadBuf {
		cr.short = true
		return cr.Read(p)
	}
	n, err := cr.src.Read(p)
	cr.note(n)
	cr.short = n == len(p)
	return n, err
}

// fill reads once into the empty buffer, after choosing its size.
func (cr *connReader) fill() error {
	cr.r, cr.w = 0, 0
	cr.resize()
	buf := cr.buf
	if cr.short && len(buf) > smallReadBuf {
		buf = buf[:smallReadBuf]
	}
	cr.short = false
	n, err := cr.src.Read(buf)
	cr.note(n)
	cr.w = n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// note records a read of n bytes from the connection.
func (cr *connReader) note(n int) {
	if n >= smallReadBuf {
		cr.quiet = 0
	} else {
		cr.quiet++
	}
}

// resize picks the empty buffer's size: large once a read filled the small
// one (more was waiting), small again after quietReads reads in a row that
// would each have fit it (the burst is over).
func (cr *connReader) resize() {
	switch {
	case cr.large == nil && cr.quiet == 0:
		cr.large = largeBufs.Get().(*[largeReadBuf]byte)
		cr.buf = cr.large[:]
	case cr.large != nil && cr.quiet >= quietReads:
		cr.release()
	}
}

// release returns the borrowed buffer, which is empty, and goes on with
// the small one.
func (cr *connReader) release() {
	largeBufs.Put(cr.large)
	cr.large = nil
	cr.buf = cr.small
}

// close returns a borrowed buffer, whatever it holds; the reader must not
// be used after.
func (cr *connReader) close() {
	if cr.large != nil {
		cr.r, cr.w = 0, 0
		cr.release()
	}
}

// ReadByte reads one byte.
func (cr *connReader) ReadByte() (byte, error) {
	if cr.r == cr.w {
		if err := cr.fill(); err != nil {
			return 0, err
		}
	}
	c := cr.buf[cr.r]
	cr.r++
	return c, nil
}
