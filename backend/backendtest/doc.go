// Package backendtest is the conformance suite every data-plane backend
// passes: the contract of backend.Backend, backend.Route and
// backend.WorkRequest, checked on real memory with every byte verified.
//
// A backend's test calls Run with a Factory that builds started backends:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, backendtest.Factory{NewBackend: ..., WrongKeyErr: buffer.ErrBadKey, ...})
//	}
//
// Each subtest builds two managers' backends (owner ids differ) and routes
// from A (initiator) to B via PrepareRoute, AcceptRoute and Complete, and
// closes everything at its end. Waits are bounded (a hang fails the test);
// no test asserts a wall-clock time.
package backendtest
