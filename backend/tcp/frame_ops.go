package tcp

import "github.com/rdmamgr/rdmamgr/backend"

// The wire ops and what their frames hold beyond the fixed headers
// (frame.go).

// wireOp is the wire op of a work request's op (0 for none).
func wireOp(o backend.Op) byte {
	switch o {
	case backend.OpWrite:
		return opWrite
	case backend.OpRead:
		return opRead
	case backend.OpWriteImm:
		return opWriteImm
	case backend.OpSend:
		return opSend
	case backend.OpCompareSwap:
		return opCompareSwap
	case backend.OpFetchAdd:
		return opFetchAdd
	}
	return 0
}

// opOf is the backend.Op of a wire op (for errors).
func opOf(w byte) backend.Op {
	switch w {
	case opWriteImm:
		return backend.OpWriteImm
	case opSend:
		return backend.OpSend
	case opCompareSwap:
		return backend.OpCompareSwap
	case opFetchAdd:
		return backend.OpFetchAdd
	}
	return backend.Op(w) // write, read; a ping is never an error
}

// reqSize is the header size of a request with wire op w, without an
// origin.
func reqSize(w byte) int {
	if w >= opWriteImm && w <= opFetchAdd {
		return reqOpsSize
	}
	return reqHeaderSize
}

// reqSizeOf is the header size of a request whose first two bytes are w
// and flags: an origin counts only on the ops that may carry one (on
// others the flag is refused by decode).
func reqSizeOf(w, flags byte) int {
	if flags&flagOrigin != 0 && hasTrailer(w) {
		return reqOpsSize + reqOriginSize
	}
	return reqSize(w)
}

// respSize is the header size of a response to wire op w (op without
// the response flag).
func respSize(w byte) int {
	if w == opCompareSwap || w == opFetchAdd {
		return respMaxSize
	}
	return respHeaderSize
}

// hasTrailer reports whether a request of wire op w ends with a trailer.
func hasTrailer(w byte) bool { return w == opWriteImm || w == opSend }

// hasPayload reports whether a request of wire op w carries length bytes
// of payload.
func hasPayload(w byte) bool { return w == opWrite || w == opWriteImm || w == opSend }
