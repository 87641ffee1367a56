package buffer

// Refs returns the number of references held on r (test only).
func (r *Region) Refs() int64 { return r.state.Load() &^ releasedBit }

// Released reports whether Release has started on r (test only).
func (r *Region) Released() bool { return r.state.Load()&releasedBit != 0 }
