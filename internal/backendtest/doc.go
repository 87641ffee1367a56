// Package backendtest is the conformance suite every data-plane backend
// passes: the contract of backend.Backend, backend.Route and
// backend.WorkRequest, checked on real memory with every byte verified.
//
// A backend's test calls Run with a Factory that builds started backends:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, backendtest.Factory{NewBackend: ..., WrongKeyErr: rdmamgr.ErrBadKey, ...})
//	}
//
// Each subtest builds two managers' backends (owner ids differ) and routes
// from A (initiator) to B via PrepareRoute, AcceptRoute and Complete, and
// closes everything at its end. Waits are bounded (a hang fails the test);
// no test asserts a wall-clock time.
//
// The suite's helpers are exported for backends' own tests: memory and
// bytes (helpers.go: Alloc, Random, Slice, FirstDiff, AssertSame),
// completions (Recorder, NewWR, Do), routes (pair.go: Connect,
// MustConnect, CloseAtCleanup, CheckRoute). The suite itself is split by
// concern: data.go (bytes land where they should), refusals.go (what the
// owner must refuse changes nothing), lifecycle.go (closing), cancel.go
// (cancellation and deadlines), and stress.go (CancelStress, run through
// queue pairs by the backends' and the multi-process tests).
//
// With Factory.Verbs the suite also checks PutWithImm, Send and the
// atomics (verbs.go, RunVerbs): B gets an Inbox (inbox.go: bounded queues
// of events and messages, receive buffers posted from B's registry, a
// record of refusals and of faults such as an event seen before its
// bytes) before any route, as a manager gives its own; the cases are in
// verbs_events.go, verbs_flood.go, verbs_send.go and verbs_atomic.go,
// and RC ordering in order.go: with many Puts (large split ones, small
// ones) or FetchAdds in flight ahead of each PutWithImm, Send and
// SendWithImm, the Inbox checks on delivery (SetCheck, SetMessageCheck)
// that their bytes or effects are already in the owner's memory.
// Where backends legitimately differ the Factory says so
// (NotifyDeniedErr, AtomicDeniedErr, MisalignedBaseErr), and an
// operation A's backend.Capabilities does not carry is skipped.
package backendtest
