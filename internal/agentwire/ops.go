package agentwire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// maxLease bounds a handle's lease, as buffer.FromProto does.
const maxLease = 365 * 24 * time.Hour

// Local names the process's own memory of a post: a registered region of
// its manager (id and key, which the agent maps through P's shm owner
// side), and the slice of it the operation uses.
type Local struct {
	Region uint64
	Key    buffer.Key
	Offset uint64
	Length uint64
}

// Post is one operation P asks its agent to run (P → agent).
type Post struct {
	WRID   uint64     // P's id of the operation, echoed by done and named by cancel
	Op     backend.Op // OpWrite ... OpFetchAdd
	HasImm bool       // OpSend only: SendWithImm
	Imm    uint32     // OpWriteImm, and OpSend with HasImm
	Via    uint16     // the target process's slot at the far agent, not 0
	// Local: for Put, Get, PutWithImm and Send; zero for atomics. Its
	// Length is Remote.Length (Send: the message's length), never 0.
	Local Local
	// Remote is zero for Send, 8 bytes for atomics. Its lease travels in
	// whole milliseconds, as in the handle's protobuf form.
	Remote buffer.Buffer
	// FarAgent is the actor address of the target's agent, not empty.
	FarAgent string
	// FarAgentID is the manager id of the target's agent (random per
	// agent start), not 0: Via is a slot of that agent only. The agent
	// refuses the post with PEER_GONE when its route to FarAgent reaches
	// another manager (the far agent restarted: the slot may be another
	// process's now).
	FarAgentID uint64
	// Compare and Swap: OpCompareSwap's operands, Swap OpFetchAdd's addend.
	Compare, Swap uint64
	// Deadline is how long the operation may take from its arrival at
	// the agent (0: no deadline).
	Deadline time.Duration
}

const flagHasImm = 1

// check refuses a post whose fields do not fit its op.
func (p *Post) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("agentwire: post %d (%v): "+format+": %w", append([]any{p.WRID, p.Op}, append(a, rdmamgr.ErrProtocol)...)...)
	}
	if p.Op < backend.OpWrite || p.Op > backend.OpFetchAdd {
		return bad("unknown op %d", uint8(p.Op))
	}
	if p.Via == 0 {
		return bad("no via")
	}
	if p.FarAgent == "" {
		return bad("no far agent")
	}
	if err := checkText("far agent", p.FarAgent, MaxAddr); err != nil {
		return err
	}
	if p.FarAgentID == 0 {
		return bad("no far agent id")
	}
	if p.Deadline < 0 {
		return bad("deadline %v", p.Deadline)
	}
	if p.HasImm && p.Op != backend.OpSend {
		return bad("has-imm")
	}
	if p.Imm != 0 && p.Op != backend.OpWriteImm && !(p.Op == backend.OpSend && p.HasImm) {
		return bad("imm %d", p.Imm)
	}
	if p.Compare != 0 && p.Op != backend.OpCompareSwap || p.Swap != 0 && !p.Op.Atomic() {
		return bad("atomic operands")
	}
	if p.Op.Atomic() {
		if p.Local != (Local{}) {
			return bad("local memory")
		}
		if p.Remote.Length != 8 {
			return bad("atomic on %d bytes", p.Remote.Length)
		}
		return checkRemote(p)
	}
	l := &p.Local
	if l.Region == 0 || l.Length == 0 || l.Offset+l.Length < l.Offset {
		return bad("local region %d [%d,+%d)", l.Region, l.Offset, l.Length)
	}
	if p.Op == backend.OpSend {
		if !p.Remote.IsZero() {
			return bad("remote buffer")
		}
		return nil
	}
	if p.Remote.Length != l.Length {
		return bad("local %d bytes, remote %d", l.Length, p.Remote.Length)
	}
	return checkRemote(p)
}

// checkRemote checks the remote handle as buffer.FromProto does.
func checkRemote(p *Post) error {
	r := &p.Remote
	var why string
	switch {
	case r.OwnerID == 0:
		why = "no owner"
	case r.Region == 0:
		why = "no region"
	case !r.Access.Valid():
		why = fmt.Sprintf("access %#x", uint32(r.Access))
	case r.Offset+r.Length < r.Offset:
		why = "offset + length overflows"
	case r.Lease < 0 || r.Lease > maxLease:
		why = fmt.Sprintf("lease %v", r.Lease)
	case (r.RDMA.Addr == 0) != (r.RDMA.RKey == 0):
		why = "rdma addr without rkey"
	default:
		return checkText("owner address", r.OwnerAddr, MaxAddr)
	}
	return fmt.Errorf("agentwire: post %d: remote handle: %s: %w", p.WRID, why, rdmamgr.ErrProtocol)
}

// postMax bounds one encoded post (both strings at MaxAddr).
const postMax = 8 + 1 + 1 + 4 + 2 + (8 + buffer.KeySize + 8 + 8) +
	(8 + 8 + 8 + 8 + buffer.KeySize + 4 + 8 + 4 + 8 + 1 + MaxAddr) + 1 + MaxAddr + 8 + 8 + 8 + 8

func appendPost(b []byte, p *Post) []byte {
	b = binary.LittleEndian.AppendUint64(b, p.WRID)
	flags := byte(0)
	if p.HasImm {
		flags |= flagHasImm
	}
	b = append(b, byte(p.Op), flags)
	b = binary.LittleEndian.AppendUint32(b, p.Imm)
	b = binary.LittleEndian.AppendUint16(b, p.Via)
	b = binary.LittleEndian.AppendUint64(b, p.Local.Region)
	b = append(b, p.Local.Key[:]...)
	b = binary.LittleEndian.AppendUint64(b, p.Local.Offset)
	b = binary.LittleEndian.AppendUint64(b, p.Local.Length)
	r := &p.Remote
	b = binary.LittleEndian.AppendUint64(b, r.OwnerID)
	b = binary.LittleEndian.AppendUint64(b, r.Region)
	b = binary.LittleEndian.AppendUint64(b, r.Offset)
	b = binary.LittleEndian.AppendUint64(b, r.Length)
	b = append(b, r.Key[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Access))
	b = binary.LittleEndian.AppendUint64(b, r.RDMA.Addr)
	b = binary.LittleEndian.AppendUint32(b, r.RDMA.RKey)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Lease/time.Millisecond))
	b = appendStr(b, r.OwnerAddr)
	b = appendStr(b, p.FarAgent)
	b = binary.LittleEndian.AppendUint64(b, p.FarAgentID)
	b = binary.LittleEndian.AppendUint64(b, p.Compare)
	b = binary.LittleEndian.AppendUint64(b, p.Swap)
	return binary.LittleEndian.AppendUint64(b, uint64(p.Deadline))
}

// decodePost decodes a post into p; prevOwner and prevFar are the strings
// p held before (the same text is not allocated again).
func decodePost(d *decoder, p *Post, prevOwner, prevFar string) {
	p.WRID = d.U64()
	p.Op = backend.Op(d.U8())
	flags := d.U8()
	if d.Err == nil && flags&^flagHasImm != 0 {
		d.fail("post flags %#x", flags)
	}
	p.HasImm = flags&flagHasImm != 0
	p.Imm, p.Via = d.U32(), d.U16()
	p.Local.Region = d.U64()
	copy(p.Local.Key[:], d.Take(buffer.KeySize))
	p.Local.Offset, p.Local.Length = d.U64(), d.U64()
	r := &p.Remote
	r.OwnerID, r.Region, r.Offset, r.Length = d.U64(), d.U64(), d.U64(), d.U64()
	copy(r.Key[:], d.Take(buffer.KeySize))
	r.Access = buffer.Access(d.U32())
	r.RDMA.Addr, r.RDMA.RKey = d.U64(), d.U32()
	lease := d.U64()
	if d.Err == nil && lease > uint64(maxLease/time.Millisecond) {
		d.fail("lease of %d ms", lease)
	}
	r.Lease = time.Duration(lease) * time.Millisecond
	r.OwnerAddr = d.strAs("owner address", prevOwner)
	p.FarAgent = d.strAs("far agent", prevFar)
	p.FarAgentID = d.U64()
	p.Compare, p.Swap = d.U64(), d.U64()
	dl := d.U64()
	if d.Err == nil && dl > math.MaxInt64 {
		d.fail("deadline %d", dl)
	}
	p.Deadline = time.Duration(dl)
	if d.Err == nil {
		d.Err = p.check()
	}
}

// Done is the outcome of a post (agent → P).
type Done struct {
	WRID   uint64
	Code   uint32 // a wire code (rdmapb.Code); OK on success
	Result uint64 // an atomic's old word, when Code is OK; else 0
}

func (r *Done) check() error {
	if err := checkCode(r.Code); err != nil {
		return err
	}
	if r.Code != 0 && r.Result != 0 {
		return fmt.Errorf("agentwire: done %d: result of a failed op: %w", r.WRID, rdmamgr.ErrProtocol)
	}
	return nil
}

const doneSize = 8 + 4 + 8

// DoneOf returns the done record of an operation that ended with err (nil:
// OK, with result).
func DoneOf(wrid uint64, err error, result uint64) Done {
	if err != nil {
		return Done{WRID: wrid, Code: uint32(backend.Code(err))}
	}
	return Done{WRID: wrid, Result: result}
}

// Err returns the error of a done record of op: nil for OK, else a
// *backend.RemoteError of its code (errors.Is matches the code's sentinel).
func (r *Done) Err(op backend.Op) error {
	if r.Code == 0 {
		return nil
	}
	return &backend.RemoteError{Code: rdmapb.Code(r.Code), Op: op}
}
