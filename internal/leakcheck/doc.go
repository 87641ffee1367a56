// Package leakcheck groups this process's goroutines by what they run, for
// the one leak check goleak cannot express: growth within a bound.
//
// The "nothing left over" checks of the tests use go.uber.org/goleak. A
// long test whose peers die and restart (test.TestSoak) cannot: protoactor
// keeps one endpoint per peer it talked to, and after each restart the
// endpoint to the new incarnation runs on new goroutines, so goleak's
// IgnoreCurrent (goroutine ids) flags them, and ignoring their functions
// would hide a leak of exactly those. That test bounds the growth of the
// goroutine count instead, and when the bound is passed it shows the
// groups (top function and creator) that grew, with one stack each: what
// Take and Growth give.
package leakcheck
