package lewire

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
)

func TestDecoder(t *testing.T) {
	d := Decoder{B: []byte{1, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9}, Prefix: "x"}
	if a, b, c, e := d.U8(), d.U16(), d.U32(), d.U64(); a != 1 || b != 2 || c != 3 || e != 4 || d.Err != nil {
		t.Fatalf("read %d %d %d %d %v", a, b, c, e, d.Err)
	}
	p := d.Take(1)
	if len(p) != 1 || cap(p) != 1 || p[0] != 9 || len(d.B) != 0 {
		t.Fatalf("take: %v (cap %d), left %d", p, cap(p), len(d.B))
	}
	if v := d.U32(); v != 0 || !errors.Is(d.Err, rdmamgr.ErrProtocol) || d.Err.Error() != "x: truncated message: protocol error" {
		t.Fatalf("past the end: %d %v", v, d.Err)
	}
	first := d.Err
	d.B = []byte{5}
	if v := d.U8(); v != 0 || d.Err != first || len(d.B) != 1 {
		t.Fatalf("after a failure: %d %v, %d left", v, d.Err, len(d.B))
	}
	if p := (&Decoder{B: []byte{1}}).Take(-1); p != nil {
		t.Fatal("negative take returned bytes")
	}
}
