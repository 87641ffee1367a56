//go:build linux

package test

import (
	"time"

	"go.uber.org/goleak"
)

// waitNoLeaks waits, up to timeout, until no goroutine is left but the
// caller's (and those goleak knows to belong to the runtime and the
// testing package); it returns goleak's list of the others then ("" when
// clean). TestMain calls it after the test's node is closed: whatever
// still runs then, in rdmamgr or in a library it drives, was leaked.
func waitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		err := goleak.Find() // itself retries for about a second
		if err == nil {
			return ""
		}
		if time.Now().After(deadline) {
			return err.Error()
		}
	}
}
