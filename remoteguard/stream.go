package remoteguard

import (
	"context"
	"sync"

	"google.golang.org/grpc"
)

// remotingReceive is the method of protoactor's endpoint writer stream.
var remotingReceive = remotingPrefix + "Receive"

// closeConnWithStream closes the gRPC client connection of a Remoting
// stream that failed to open or ended. protoactor's endpoint writer dials a
// new grpc.ClientConn for every connection attempt and drops the one of an
// attempt that failed without closing it (remote/endpoint_writer.go,
// initialize and initializeInternal): each message sent to a peer that is
// down (a restarting daemon) leaked a ClientConn that kept reconnecting to
// the peer's address for the life of the process, with its goroutines and,
// once the peer was back, an idle socket. The writer never uses a
// connection again after its stream failed (it stops, or retries with a new
// one), so closing it here is safe; its own later Close of the same
// connection only returns an error it logs.
func (set *streamSet) closeConnWithStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if method != remotingReceive {
		return s, err
	}
	if err != nil {
		cc.Close()
		return nil, err
	}
	cs := &closingStream{ClientStream: s, cc: cc, set: set}
	set.add(cs)
	return cs, nil
}

// closingStream closes its connection once a send or receive fails.
type closingStream struct {
	grpc.ClientStream
	cc   *grpc.ClientConn
	set  *streamSet
	once sync.Once
}

func (s *closingStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil {
		s.close()
	}
	return err
}

func (s *closingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.close()
	}
	return err
}

// close closes the connection once; a concurrent caller waits until it is
// closed (sync.Once), which is what Stop relies on.
func (s *closingStream) close() {
	s.once.Do(func() {
		s.cc.Close()
		s.set.remove(s)
	})
}
