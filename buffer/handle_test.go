package buffer

import (
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmamgr/rdmamgr"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func TestSlice(t *testing.T) {
	b := Buffer{OwnerID: 7, OwnerAddr: "h:1", Region: 3, Length: 1000, Access: AccessReadWrite, Key: Key{1, 2}}
	s, err := b.Slice(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	if s.Offset != 100 || s.Length != 200 || s.Region != b.Region || s.Key != b.Key || s.Access != b.Access || s.OwnerID != b.OwnerID {
		t.Fatalf("slice %v", s)
	}
	ss, err := s.Slice(50, 20)
	if err != nil {
		t.Fatal(err)
	}
	if ss.Offset != 150 || ss.Length != 20 || ss.End() != 170 {
		t.Fatalf("nested slice %v", ss)
	}
	// A nested slice cannot grow past its parent even though the region could.
	if _, err = s.Slice(150, 51); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Errorf("slice past parent: %v, want ErrOutOfRange", err)
	}

	empty, err := b.Slice(1000, 0)
	if err != nil || empty.Length != 0 || empty.Offset != 1000 {
		t.Errorf("empty slice at end: %v %v", empty, err)
	}
	whole, err := b.Slice(0, 1000)
	if err != nil || whole != b {
		t.Errorf("whole slice: %v %v", whole, err)
	}

	bad := []struct{ off, n uint64 }{
		{1001, 0},
		{0, 1001},
		{1000, 1},
		{999, 2},
		{math.MaxUint64, 0},
		{math.MaxUint64, 1},
		{0, math.MaxUint64},
		{1, math.MaxUint64},
		{math.MaxUint64, math.MaxUint64},
		{500, math.MaxUint64 - 499}, // off+n wraps to 1
	}
	for _, c := range bad {
		_, err := b.Slice(c.off, c.n)
		if !errors.Is(err, rdmamgr.ErrOutOfRange) {
			t.Errorf("Slice(%d, %d) = %v, want ErrOutOfRange", c.off, c.n, err)
		}
	}
}

func TestCheckRange(t *testing.T) {
	const M = math.MaxUint64
	cases := []struct {
		size, off, n uint64
		ok           bool
	}{
		{0, 0, 0, true},
		{0, 0, 1, false},
		{0, 1, 0, false},
		{10, 0, 10, true},
		{10, 10, 0, true},
		{10, 9, 1, true},
		{10, 9, 2, false},
		{10, 11, 0, false},
		{10, 0, 11, false},
		{10, M, 0, false},
		{10, M, 1, false},
		{10, 1, M, false},
		{10, M, M, false},
		{10, 5, M - 4, false}, // off+n wraps to 0
		{M, 0, M, true},
		{M, M, 0, true},
		{M, 1, M, false},
		{M, M, 1, false},
		{M, M - 1, 1, true},
		{M, M / 2, M/2 + 1, true},
		{M, M/2 + 1, M/2 + 1, false},
	}
	for _, c := range cases {
		err := CheckRange(c.size, c.off, c.n)
		if c.ok && err != nil {
			t.Errorf("CheckRange(%d, %d, %d) = %v, want nil", c.size, c.off, c.n, err)
		}
		if !c.ok && !errors.Is(err, rdmamgr.ErrOutOfRange) {
			t.Errorf("CheckRange(%d, %d, %d) = %v, want ErrOutOfRange", c.size, c.off, c.n, err)
		}
	}
}

func TestProtoRoundTrip(t *testing.T) {
	b := Buffer{OwnerID: 0x1122334455667788, OwnerAddr: "127.0.0.1:18090", Region: 9, Length: 1 << 16, Access: AccessReadWrite,
		Key: Key{0: 0xaa, 15: 0x55}, RDMA: RDMAKey{Addr: 0x7f0000001000, RKey: 0x1234}, Lease: 90 * time.Second}
	s, _ := b.Slice(100, 200)
	dev := b
	dev.Location = CUDA(3)
	for _, h := range []Buffer{b, s, {OwnerID: 1, Region: 1, Access: AccessWrite}, dev} {
		p := h.Proto()
		got, err := FromProto(p)
		if err != nil {
			t.Fatalf("FromProto(%v): %v", h, err)
		}
		if got != h {
			t.Errorf("FromProto(Proto()) = %v, want %v", got, h)
		}
		wire, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(wire) != h.MarshalledSize() {
			t.Errorf("MarshalledSize %d, marshalled %d", h.MarshalledSize(), len(wire))
		}
		var q rdmapb.Buffer
		if err := proto.Unmarshal(wire, &q); err != nil {
			t.Fatal(err)
		}
		got, err = FromProto(&q)
		if err != nil || got != h {
			t.Errorf("wire round trip: %v, %v", got, err)
		}
	}
	// Proto copies the key: changing the message does not change the handle.
	p := b.Proto()
	p.Key[0] ^= 0xff
	if b.Key[0] == p.Key[0] {
		t.Errorf("Proto shares the key with the handle")
	}
	got, err := FromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	p.Key[1] ^= 0xff
	if got.Key[1] == p.Key[1] {
		t.Errorf("FromProto shares the key with the message")
	}
}

func TestFromProtoRejects(t *testing.T) {
	valid := func() *rdmapb.Buffer {
		return &rdmapb.Buffer{OwnerId: 7, OwnerAddr: "h:1", Region: 3, Offset: 10, Length: 20, Key: make([]byte, KeySize), Access: uint32(AccessRead)}
	}
	if _, err := FromProto(valid()); err != nil {
		t.Fatalf("valid handle: %v", err)
	}
	cases := []struct {
		name string
		mod  func(p *rdmapb.Buffer) *rdmapb.Buffer
		want error
	}{
		{"nil", func(*rdmapb.Buffer) *rdmapb.Buffer { return nil }, rdmamgr.ErrInvalid},
		{"zero owner", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.OwnerId = 0; return p }, rdmamgr.ErrInvalid},
		{"zero region", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Region = 0; return p }, rdmamgr.ErrInvalid},
		{"no key", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Key = nil; return p }, rdmamgr.ErrInvalid},
		{"short key", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Key = p.Key[:KeySize-1]; return p }, rdmamgr.ErrInvalid},
		{"long key", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Key = make([]byte, KeySize+1); return p }, rdmamgr.ErrInvalid},
		{"access bit 16", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Access = 16; return p }, rdmamgr.ErrInvalid},
		{"access high bit", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Access = 1<<31 | 1; return p }, rdmamgr.ErrInvalid},
		{"offset+length overflow", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Offset = math.MaxUint64; p.Length = 1; return p }, rdmamgr.ErrOutOfRange},
		{"length overflow", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Offset = 2; p.Length = math.MaxUint64 - 1; return p }, rdmamgr.ErrOutOfRange},
		{"location past the last device", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Location = MaxCUDADevices + 1; return p }, rdmamgr.ErrInvalid},
		{"location high bit", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Location = 1 << 31; return p }, rdmamgr.ErrInvalid},
		{"both max", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Offset = math.MaxUint64; p.Length = math.MaxUint64; return p }, rdmamgr.ErrOutOfRange},
	}
	for _, c := range cases {
		b, err := FromProto(c.mod(valid()))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: FromProto = %v, %v; want %v", c.name, b, err, c.want)
		}
		if err != nil && !b.IsZero() {
			t.Errorf("%s: non-zero buffer with error", c.name)
		}
	}
	// Edge values that are valid.
	p := valid()
	p.Offset, p.Length, p.Access = math.MaxUint64, 0, 0
	if _, err := FromProto(p); err != nil {
		t.Errorf("max offset, zero length: %v", err)
	}
	p.Offset, p.Length = 1, math.MaxUint64-1
	if _, err := FromProto(p); err != nil {
		t.Errorf("offset+length == MaxUint64: %v", err)
	}
	p.Location = MaxCUDADevices // the last device
	if b, err := FromProto(p); err != nil || b.Location != CUDA(MaxCUDADevices-1) {
		t.Errorf("location of the last device: %v, %v", b.Location, err)
	}
}

func TestLocation(t *testing.T) {
	for _, c := range []struct {
		s     string
		want  Location
		dev   int
		isGPU bool
	}{{"host", Host, 0, false}, {"", Host, 0, false}, {"cuda", CUDA(0), 0, true}, {"cuda:0", CUDA(0), 0, true}, {"cuda:7", CUDA(7), 7, true}, {"cuda:63", CUDA(63), 63, true}} {
		l, err := ParseLocation(c.s)
		if err != nil || l != c.want {
			t.Errorf("ParseLocation(%q) = %v, %v; want %v", c.s, l, err, c.want)
		}
		if dev, ok := l.Device(); ok != c.isGPU || dev != c.dev {
			t.Errorf("%v.Device() = %d, %v", l, dev, ok)
		}
		if c.s != "" && c.s != "cuda" && l.String() != c.s {
			t.Errorf("String() = %q, want %q", l.String(), c.s)
		}
	}
	for _, s := range []string{"cuda:64", "cuda:-1", "cuda:", "cuda:x", "gpu", "CUDA:1", "cuda:1 "} {
		if l, err := ParseLocation(s); !errors.Is(err, rdmamgr.ErrInvalid) {
			t.Errorf("ParseLocation(%q) = %v, %v; want ErrInvalid", s, l, err)
		}
	}
	if CUDA(-1).Valid() || CUDA(MaxCUDADevices).Valid() {
		t.Errorf("CUDA of a device out of range is valid")
	}
}

func TestMarshalledSize(t *testing.T) {
	var key Key
	for i := range key {
		key[i] = 0xff
	}
	b := Buffer{
		OwnerID:   0xfedcba9876543210,
		OwnerAddr: "127.0.0.1:18090",
		Region:    12345,
		Offset:    1 << 30,
		Length:    16 << 20,
		Key:       key,
		Access:    AccessReadWrite,
	}
	n := b.MarshalledSize()
	t.Logf("marshalled size of %v: %d bytes", b, n)
	if n > 64 {
		t.Errorf("marshalled size %d > 64", n)
	}
	wire, err := proto.Marshal(b.Proto())
	if err != nil || len(wire) != n {
		t.Errorf("proto.Marshal: %d bytes, %v", len(wire), err)
	}
}

func TestAccessAndKey(t *testing.T) {
	cases := []struct {
		a     Access
		valid bool
		s     string
	}{
		{0, true, "none"},
		{AccessRead, true, "read"},
		{AccessWrite, true, "write"},
		{AccessReadWrite, true, "read-write"},
		{AccessAtomic, true, "atomic"},
		{AccessReadWrite | AccessAtomic | AccessNotify, true, "read-write+atomic+notify"},
		{AccessWrite | AccessNotify, true, "write+notify"},
		{16, false, "access(16)"},
		{19, false, "access(19)"},
	}
	for _, c := range cases {
		if c.a.Valid() != c.valid || c.a.String() != c.s {
			t.Errorf("%d: Valid %v String %q", uint32(c.a), c.a.Valid(), c.a.String())
		}
	}
	if !AccessReadWrite.Allows(AccessRead) || !AccessReadWrite.Allows(AccessWrite) || !AccessRead.Allows(0) {
		t.Errorf("Allows too strict")
	}
	if AccessRead.Allows(AccessWrite) || AccessWrite.Allows(AccessRead) || AccessRead.Allows(AccessReadWrite) || AccessReadWrite.Allows(AccessAtomic) {
		t.Errorf("Allows too lax")
	}
	if uint32(AccessRead) != uint32(rdmapb.Access_ACCESS_READ) || uint32(AccessReadWrite) != uint32(rdmapb.Access_ACCESS_READ_WRITE) {
		t.Errorf("access bits differ from the proto enum")
	}
	var k1, k2 Key
	k1[5] = 1
	if k1.Equal(k2) || !k1.Equal(k1) || !k2.Equal(Key{}) {
		t.Errorf("Key.Equal wrong")
	}
	if !(Buffer{}).IsZero() || (Buffer{Region: 1}).IsZero() {
		t.Errorf("IsZero wrong")
	}
	if s := (Buffer{OwnerID: 1, OwnerAddr: "a:1", Region: 2, Offset: 3, Length: 4, Access: AccessRead}).String(); s != "buffer{owner=0000000000000001@a:1 region=2 [3,+4) read}" {
		t.Errorf("String %q", s)
	}
}

// Key.Equal folds words: a difference in any bit of any byte (either
// word, either half of a word) must still tell the keys apart.
func TestKeyEqualEveryBit(t *testing.T) {
	var a Key
	for i := range a {
		a[i] = byte(i*37 + 11)
	}
	if !a.Equal(a) {
		t.Fatal("a key differs from itself")
	}
	for i := range KeySize {
		for bit := range 8 {
			b := a
			b[i] ^= 1 << bit
			if a.Equal(b) || b.Equal(a) {
				t.Fatalf("keys differing in byte %d bit %d compare equal", i, bit)
			}
		}
	}
}
