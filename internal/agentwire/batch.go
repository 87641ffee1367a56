package agentwire

import (
	"encoding/binary"
	"fmt"
)

// batchHead is a batch's type byte and record count.
const batchHead = 1 + 2

// maxRecords bounds a batch's count.
const maxRecords = 1<<16 - 1

// Batch builds one packet of records of one type: posts, dones or
// cancels. The zero Batch is not started: Start it first. It reuses its
// buffer across Start.
type Batch struct {
	b []byte
	n int
}

// Start empties the batch for records of typ (TypePost, TypeDone or
// TypeCancel).
func (b *Batch) Start(typ byte) {
	if typ != TypePost && typ != TypeDone && typ != TypeCancel {
		panic(fmt.Sprintf("agentwire: batch of message type %d", typ))
	}
	if b.b == nil {
		b.b = make([]byte, 0, MaxPacket)
	}
	b.b = append(b.b[:0], typ, 0, 0)
	b.n = 0
}

// Count returns how many records the batch holds.
func (b *Batch) Count() int { return b.n }

// Packet returns the packet, valid until the next Start or Add (nil when
// the batch is empty).
func (b *Batch) Packet() []byte {
	if b.n == 0 {
		return nil
	}
	binary.LittleEndian.PutUint16(b.b[1:3], uint16(b.n))
	return b.b
}

// room fails with ErrFull unless a record of up to n bytes fits, and
// panics when the batch holds another type.
func (b *Batch) room(typ byte, n int) error {
	if len(b.b) < batchHead || b.b[0] != typ {
		panic(fmt.Sprintf("agentwire: record of message type %d in another batch", typ))
	}
	if b.n == maxRecords || len(b.b)+n > MaxPacket {
		return ErrFull
	}
	return nil
}

// AddPost appends p. It fails with ErrFull when p does not fit (send the
// batch, Start another), and with ErrProtocol when DecodePosts would
// refuse p; either way the batch is unchanged.
func (b *Batch) AddPost(p *Post) error {
	if err := b.room(TypePost, postMax); err != nil {
		return err
	}
	if err := p.check(); err != nil {
		return err
	}
	b.b = appendPost(b.b, p)
	b.n++
	return nil
}

// AddDone appends r (ErrFull, ErrProtocol: as AddPost).
func (b *Batch) AddDone(r Done) error {
	if err := b.room(TypeDone, doneSize); err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return err
	}
	b.b = binary.LittleEndian.AppendUint64(b.b, r.WRID)
	b.b = binary.LittleEndian.AppendUint32(b.b, r.Code)
	b.b = binary.LittleEndian.AppendUint64(b.b, r.Result)
	b.n++
	return nil
}

// AddCancel appends a cancel of wrid (ErrFull: as AddPost).
func (b *Batch) AddCancel(wrid uint64) error {
	if err := b.room(TypeCancel, 8); err != nil {
		return err
	}
	b.b = binary.LittleEndian.AppendUint64(b.b, wrid)
	b.n++
	return nil
}

// batch checks a batch's head and returns its decoder and count.
func batch(pkt []byte, typ byte) (decoder, int) {
	d := newDecoder(pkt)
	if len(pkt) > MaxPacket {
		d.fail("packet of %d bytes", len(pkt))
	}
	d.head(typ)
	n := int(d.U16())
	if d.Err == nil && n == 0 {
		d.fail("empty batch")
	}
	return d, n
}

// DecodePosts checks and decodes a post batch, appending its records to
// dst[:0]. A packet is all or nothing: on error dst[:0] is returned.
func DecodePosts(pkt []byte, dst []Post) ([]Post, error) {
	d, n := batch(pkt, TypePost)
	dst = dst[:0]
	var prevOwner, prevFar string // the strings of the last post decoded here
	for i := 0; i < n && d.Err == nil; i++ {
		if i < cap(dst) {
			dst = dst[:i+1]
			if s := dst[i].Remote.OwnerAddr; s != "" {
				prevOwner = s
			}
			if s := dst[i].FarAgent; s != "" {
				prevFar = s
			}
			dst[i] = Post{}
		} else {
			dst = append(dst, Post{})
		}
		decodePost(&d, &dst[i], prevOwner, prevFar)
		prevOwner, prevFar = dst[i].Remote.OwnerAddr, dst[i].FarAgent
	}
	if err := d.end(); err != nil {
		return dst[:0], err
	}
	return dst, nil
}

// DecodeDones checks and decodes a done batch (as DecodePosts).
func DecodeDones(pkt []byte, dst []Done) ([]Done, error) {
	d, n := batch(pkt, TypeDone)
	dst = dst[:0]
	if d.Err == nil && n*doneSize != len(d.B) {
		d.fail("done batch of %d records in %d bytes", n, len(d.B))
	}
	for i := 0; i < n && d.Err == nil; i++ {
		r := Done{WRID: d.U64(), Code: d.U32(), Result: d.U64()}
		if d.Err == nil {
			d.Err = r.check()
		}
		dst = append(dst, r)
	}
	if err := d.end(); err != nil {
		return dst[:0], err
	}
	return dst, nil
}

// DecodeCancels checks and decodes a cancel batch (as DecodePosts).
func DecodeCancels(pkt []byte, dst []uint64) ([]uint64, error) {
	d, n := batch(pkt, TypeCancel)
	dst = dst[:0]
	if d.Err == nil && n*8 != len(d.B) {
		d.fail("cancel batch of %d records in %d bytes", n, len(d.B))
	}
	for i := 0; i < n && d.Err == nil; i++ {
		dst = append(dst, d.U64())
	}
	if err := d.end(); err != nil {
		return dst[:0], err
	}
	return dst, nil
}
