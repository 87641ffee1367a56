package tcp

import (
	"bufio"
	"io"
)

// newReader buffers small headers; large payload reads bypass the buffer
// (bufio reads straight into a destination larger than its buffer).
func newReader(r io.Reader, size int) *bufio.Reader { return bufio.NewReaderSize(r, size) }
