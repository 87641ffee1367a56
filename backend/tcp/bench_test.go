package tcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

func BenchmarkReqHeaderEncode(b *testing.B) {
	h := reqHeader{op: opWrite, length: 4096, wrid: 1, region: 7, offset: 123, key: testKey()}
	var buf [reqHeaderSize]byte
	b.SetBytes(reqHeaderSize)
	b.ReportAllocs()
	for b.Loop() {
		h.wrid++
		h.encode(buf[:])
	}
}

func BenchmarkReqHeaderDecode(b *testing.B) {
	buf := validReq()
	var h reqHeader
	b.SetBytes(reqHeaderSize)
	b.ReportAllocs()
	for b.Loop() {
		if err := h.decode(buf, 16<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// chanCompleter hands completed work requests back to the benchmark loop.
type chanCompleter chan backendtest.Result

func (c chanCompleter) Complete(wr *backend.WorkRequest, err error) {
	c <- backendtest.Result{WR: wr, Err: err}
}

// benchOps keeps depth ops of size bytes in flight over a loopback route.
func benchOps(b *testing.B, op backend.Op, size int) { benchOpsOn(b, op, size, false, Config{}) }

// benchOpsVia is benchOps, through a host agent to its attached process
// when via is set (BenchmarkVia).
func benchOpsVia(b *testing.B, op backend.Op, size int, via bool) {
	benchOpsOn(b, op, size, via, Config{})
}

// benchOpsOn is benchOpsVia with both ends configured as cfg.
func benchOpsOn(b *testing.B, op backend.Op, size int, via bool, cfg Config) {
	const depth = 64
	var p *pair
	var hr buffer.Buffer
	var slot uint16
	if via {
		ap := newAgentPair(b, Config{}, Config{}, depth*size)
		p, hr, slot = ap.pair, ap.procH, testVia
	} else {
		p = newPair(b, cfg, cfg)
		hr, _ = backendtest.Alloc(b, p.regB, depth*size, buffer.AccessReadWrite)
	}
	_, local := backendtest.Alloc(b, p.regA, depth*size, buffer.AccessReadWrite)
	done := make(chanCompleter, depth)
	wrs := make([]*backend.WorkRequest, depth)
	for i := range wrs {
		off := i * size
		wrs[i] = &backend.WorkRequest{Op: op, Local: local[off : off+size], Remote: backendtest.Slice(b, hr, off, size), Via: slot, Done: done}
	}
	post := func(wr *backend.WorkRequest) {
		wr.Deadline = time.Now().Add(time.Minute)
		if err := p.route.Post(wr); err != nil {
			b.Fatalf("post: %v", err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	posted := 0
	for _, wr := range wrs {
		if posted == b.N {
			break
		}
		post(wr)
		posted++
	}
	for completed := 0; completed < b.N; completed++ {
		res := <-done
		if res.Err != nil {
			b.Fatalf("%v: %v", op, res.Err)
		}
		if posted < b.N {
			post(res.WR)
			posted++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

var benchSizes = []int{64, 4 << 10, 64 << 10, 1 << 20}

func BenchmarkPut(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) { benchOps(b, backend.OpWrite, size) })
	}
}

// BenchmarkVia compares, in one run, pipelined Puts and Gets served by the
// owner itself (direct) and through a host agent to its attached process
// (via: the server resolves once per connection, then serves the proxy).
func BenchmarkVia(b *testing.B) {
	for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		for _, size := range []int{64, 4 << 10} {
			for _, via := range []bool{false, true} {
				name := fmt.Sprintf("%s/size=%d/direct", op, size)
				if via {
					name = fmt.Sprintf("%s/size=%d/via", op, size)
				}
				b.Run(name, func(b *testing.B) { benchOpsVia(b, op, size, via) })
			}
		}
	}
}

func BenchmarkGet(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) { benchOps(b, backend.OpRead, size) })
	}
}

// BenchmarkTLS is BenchmarkPut and BenchmarkGet over data-plane TLS
// (--data-tls) on both ends.
//
//	go test -run '^$' -bench TLS ./backend/tcp
func BenchmarkTLS(b *testing.B) {
	creds := tlsCreds(b)
	cfg := Config{ServerTLS: creds.Server, ClientTLS: creds.Client}
	for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/size=%d", op, size), func(b *testing.B) { benchOpsOn(b, op, size, false, cfg) })
		}
	}
}
