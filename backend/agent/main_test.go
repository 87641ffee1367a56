//go:build linux

package agent

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes what it started: no goroutine is left once they ran
// (attachments' loops, bounce releases, re-attach loops, fake agents).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
