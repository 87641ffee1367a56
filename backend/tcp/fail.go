package tcp

// Fail ends the route with err (it should wrap backend.ErrPeerGone when
// the peer left): in-flight and later requests fail with it. Close still
// has to be called.
func (r *route) Fail(err error) { r.fail(err) }
