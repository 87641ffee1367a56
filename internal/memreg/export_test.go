package memreg

// Refs returns the number of references held on r (test only).
func (r *Region) Refs() int64 { return r.refs.Users() }

// Released reports whether Release has started on r (test only).
func (r *Region) Released() bool { return r.refs.Closed() }

// Drained is closed once r is released and unreferenced (test only).
func (r *Region) Drained() <-chan struct{} { return r.refs.Drained() }
