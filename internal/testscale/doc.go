// Package testscale scales the time bounds of tests with what slows them
// down: the race detector (code runs several times slower under -race)
// and a loaded machine (RDMAMGR_TEST_SCALE, a factor, for a machine
// shared with other CPU-bound work). A test bounds a wait that only
// guards against a hang with Timeout(d), and sets the timeouts of the
// code under test that are not what it tests (a peer timeout in a test of
// something else) with Timeout too, so that a slow run is never mistaken
// for a dead peer. Bounds a test asserts on (a deadline must fire within
// its interval) stay as they are: those tests measure what they mean.
//
// Only tests import it.
package testscale
