package buffer

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"google.golang.org/protobuf/proto"
)

// maxLease bounds leases carried by handles (a year).
const maxLease = 365 * 24 * time.Hour

// KeySize is the size in bytes of a region key (128 bits).
const KeySize = 16

// Key is the unguessable key of a region.
type Key [KeySize]byte

// Equal compares two keys in constant time: the words are XORed and the
// differences ORed, with no branch on the bytes (a key may come from the
// network, and so may a handle a program passes as its own buffer). Two
// loads, two XORs and an OR: a data path can afford it per operation,
// unlike a byte loop.
func (k Key) Equal(o Key) bool {
	d := (binary.LittleEndian.Uint64(k[0:8]) ^ binary.LittleEndian.Uint64(o[0:8])) |
		(binary.LittleEndian.Uint64(k[8:16]) ^ binary.LittleEndian.Uint64(o[8:16]))
	return subtle.ConstantTimeEq(int32(uint32(d)|uint32(d>>32)), 0) == 1
}

// Access is the set of operations remote peers may perform on a Buffer.
type Access uint32

const (
	// AccessRead lets peers read the buffer (Get).
	AccessRead Access = Access(rdmapb.Access_ACCESS_READ)
	// AccessWrite lets peers write the buffer (Put).
	AccessWrite Access = Access(rdmapb.Access_ACCESS_WRITE)
	// AccessReadWrite allows both.
	AccessReadWrite = AccessRead | AccessWrite
	// AccessAtomic lets peers run atomics (CompareAndSwap, FetchAdd) on
	// the buffer's 8-byte aligned words.
	AccessAtomic Access = Access(rdmapb.Access_ACCESS_ATOMIC)
	// AccessNotify lets peers notify the owner that bytes landed
	// (PutWithImm, which needs AccessWrite too).
	AccessNotify Access = Access(rdmapb.Access_ACCESS_NOTIFY)

	accessAll = AccessReadWrite | AccessAtomic | AccessNotify
)

// Allows reports whether a grants every bit of need.
func (a Access) Allows(need Access) bool { return a&need == need }

// Valid reports whether a has only known bits.
func (a Access) Valid() bool { return a&^accessAll == 0 }

func (a Access) String() string {
	switch a {
	case 0:
		return "none"
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessReadWrite:
		return "read-write"
	}
	if !a.Valid() {
		return fmt.Sprintf("access(%d)", uint32(a))
	}
	var parts []string
	if rw := a & AccessReadWrite; rw != 0 {
		parts = append(parts, rw.String())
	}
	if a&AccessAtomic != 0 {
		parts = append(parts, "atomic")
	}
	if a&AccessNotify != 0 {
		parts = append(parts, "notify")
	}
	return strings.Join(parts, "+")
}

// RDMAKey is the RDMA address and remote key of a region.
type RDMAKey struct {
	Addr uint64 // virtual address of the region's first byte
	RKey uint32 // remote key
}

// Buffer is a handle to a slice of a registered region. It is a plain value:
// copy it, slice it, send its Proto form to any actor.
type Buffer struct {
	OwnerID   uint64 // random id of the owner manager
	OwnerAddr string // actor-system address of the owner
	Region    uint64 // region id at the owner
	Offset    uint64 // offset of the slice in the region
	Length    uint64 // length of the slice
	Key       Key
	Access    Access
	// RDMA is set when the owner registered the region with an RDMA
	// backend: peers with RDMA reach it by address and rkey; every peer
	// reaches it over TCP.
	RDMA RDMAKey
	// Lease is the lease granted when the handle was issued (0: none). It
	// runs on the owner's clock; holders renew well before it ends.
	Lease time.Duration
	// Location says where the region's memory is (Host, or a CUDA
	// device's): set by the owner, it tells a peer what a transfer moves.
	Location Location
}

// IsZero reports whether b is the zero Buffer.
func (b Buffer) IsZero() bool { return b == Buffer{} }

// End returns Offset+Length; valid handles never overflow.
func (b Buffer) End() uint64 { return b.Offset + b.Length }

// Slice returns the sub-handle [off, off+n) of b. It fails with ErrOutOfRange
// if the range is not inside b, without overflow.
func (b Buffer) Slice(off, n uint64) (Buffer, error) {
	if err := CheckRange(b.Length, off, n); err != nil {
		return Buffer{}, fmt.Errorf("slice [%d,+%d) of %d-byte buffer: %w", off, n, b.Length, err)
	}
	s := b
	s.Offset = b.Offset + off
	s.Length = n
	return s, nil
}

// CheckRange reports ErrOutOfRange unless [off, off+n) lies in [0, size).
// It never overflows.
func CheckRange(size, off, n uint64) error {
	if off > size || n > size-off {
		return rdmamgr.ErrOutOfRange
	}
	return nil
}

// Proto returns the protobuf form of b.
func (b Buffer) Proto() *rdmapb.Buffer {
	return &rdmapb.Buffer{
		OwnerId:   b.OwnerID,
		OwnerAddr: b.OwnerAddr,
		Region:    b.Region,
		Offset:    b.Offset,
		Length:    b.Length,
		Key:       append([]byte(nil), b.Key[:]...),
		Access:    uint32(b.Access),
		Rkey:      b.RDMA.RKey,
		Addr:      b.RDMA.Addr,
		LeaseMs:   uint64(b.Lease / time.Millisecond),
		Location:  uint32(b.Location),
	}
}

// MarshalledSize returns the size of b's protobuf encoding.
func (b Buffer) MarshalledSize() int { return proto.Size(b.Proto()) }

// FromProto validates a handle that came from anywhere and returns it as a
// Buffer. Errors wrap ErrInvalid or ErrOutOfRange.
func FromProto(p *rdmapb.Buffer) (Buffer, error) {
	if p == nil {
		return Buffer{}, fmt.Errorf("nil handle: %w", rdmamgr.ErrInvalid)
	}
	if p.OwnerId == 0 {
		return Buffer{}, fmt.Errorf("handle without owner: %w", rdmamgr.ErrInvalid)
	}
	if p.Region == 0 {
		return Buffer{}, fmt.Errorf("handle without region: %w", rdmamgr.ErrInvalid)
	}
	if len(p.Key) != KeySize {
		return Buffer{}, fmt.Errorf("handle key of %d bytes, want %d: %w", len(p.Key), KeySize, rdmamgr.ErrInvalid)
	}
	a := Access(p.Access)
	if !a.Valid() {
		return Buffer{}, fmt.Errorf("handle access %#x: %w", p.Access, rdmamgr.ErrInvalid)
	}
	if p.Offset+p.Length < p.Offset {
		return Buffer{}, fmt.Errorf("handle offset %d + length %d overflows: %w", p.Offset, p.Length, rdmamgr.ErrOutOfRange)
	}
	if l := Location(p.Location); !l.Valid() {
		return Buffer{}, fmt.Errorf("handle memory location %d unknown: %w", p.Location, rdmamgr.ErrInvalid)
	}
	b := Buffer{
		Location:  Location(p.Location),
		OwnerID:   p.OwnerId,
		OwnerAddr: p.OwnerAddr,
		Region:    p.Region,
		Offset:    p.Offset,
		Length:    p.Length,
		Access:    a,
		RDMA:      RDMAKey{Addr: p.Addr, RKey: p.Rkey},
	}
	if p.LeaseMs > uint64(maxLease/time.Millisecond) {
		return Buffer{}, fmt.Errorf("handle lease of %d ms: %w", p.LeaseMs, rdmamgr.ErrInvalid)
	}
	b.Lease = time.Duration(p.LeaseMs) * time.Millisecond
	if (p.Addr == 0) != (p.Rkey == 0) {
		return Buffer{}, fmt.Errorf("handle with rdma addr %#x rkey %#x: %w", p.Addr, p.Rkey, rdmamgr.ErrInvalid)
	}
	copy(b.Key[:], p.Key)
	return b, nil
}

func (b Buffer) String() string {
	if b.Location != Host {
		return fmt.Sprintf("buffer{owner=%016x@%s region=%d [%d,+%d) %s %s}", b.OwnerID, b.OwnerAddr, b.Region, b.Offset, b.Length, b.Access, b.Location)
	}
	return fmt.Sprintf("buffer{owner=%016x@%s region=%d [%d,+%d) %s}", b.OwnerID, b.OwnerAddr, b.Region, b.Offset, b.Length, b.Access)
}
