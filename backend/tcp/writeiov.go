package tcp

import "net"

// writeIOV writes v to c as v.WriteTo(c) does, consuming what it wrote
// from v; on a TLS data connection as records (tlsBufConn.WriteBuffers),
// which WriteTo cannot see through. A batch of one buffer (every batch
// of small frames: the writer's stage holds them all) goes with write
// rather than writev: on loopback the kernel's writev of one iovec costs
// about half a microsecond more than a write of the same bytes
// (BenchmarkWriteOneBuffer), once per batch on each side of a round trip.
func writeIOV(c net.Conn, v *net.Buffers) (int64, error) {
	if t, ok := c.(*tlsBufConn); ok {
		return t.WriteBuffers(v)
	}
	if len(*v) != 1 {
		return v.WriteTo(c)
	}
	b := (*v)[0]
	n, err := c.Write(b) // all of b, or an error
	if n == len(b) {
		(*v)[0] = nil
		*v = (*v)[1:]
	} else {
		(*v)[0] = b[n:]
	}
	return int64(n), err
}
