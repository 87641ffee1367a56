package buffer

import (
	"testing"

	"google.golang.org/protobuf/proto"

	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// FuzzBufferFromProto feeds arbitrary bytes through the path a handle from
// the network takes: protobuf decoding, then FromProto. It must never
// panic; an accepted handle must round-trip and stay inside uint64 bounds.
func FuzzBufferFromProto(f *testing.F) {
	good := Buffer{OwnerID: 7, OwnerAddr: "127.0.0.1:8090", Region: 3, Offset: 4096, Length: 1 << 20, Access: AccessReadWrite}
	good.Key[0] = 1
	seed, _ := proto.Marshal(good.Proto())
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	over := good
	over.Offset, over.Length = 1<<63, 1<<63
	seed2, _ := proto.Marshal(over.Proto())
	f.Add(seed2)
	dev := good
	dev.Location = CUDA(1)
	seed3, _ := proto.Marshal(dev.Proto())
	f.Add(seed3)
	f.Fuzz(func(t *testing.T, data []byte) {
		var p rdmapb.Buffer
		if err := proto.Unmarshal(data, &p); err != nil {
			return
		}
		b, err := FromProto(&p)
		if err != nil {
			return
		}
		if b.Offset+b.Length < b.Offset {
			t.Fatalf("accepted an overflowing handle %v", b)
		}
		if !b.Location.Valid() {
			t.Fatalf("accepted location %d", b.Location)
		}
		if !b.Access.Valid() {
			t.Fatalf("accepted access %d", b.Access)
		}
		b2, err := FromProto(b.Proto())
		if err != nil || b2 != b {
			t.Fatalf("round trip: %v, %v; want %v", b2, err, b)
		}
		// Slicing never escapes the handle.
		if s, err := b.Slice(b.Length/2, b.Length-b.Length/2); err != nil || s.End() != b.End() {
			t.Fatalf("slice of %v: %v, %v", b, s, err)
		}
	})
}
