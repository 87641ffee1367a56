//go:build ibverbs

package ibverbs

import (
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs a child process's part (process_test.go) when asked to,
// else the tests, and fails them if any goroutine is left after them.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// requireDevices skips the test without RDMA devices, unless
// RDMAMGR_REQUIRE_IBVERBS=1 (the Soft-RoCE VM run of test/softroce/ci.sh),
// where it fails.
func requireDevices(t testing.TB) []DeviceInfo {
	t.Helper()
	devs, err := Devices()
	if err == nil && len(devs) > 0 {
		return devs
	}
	if os.Getenv("RDMAMGR_REQUIRE_IBVERBS") == "1" {
		t.Fatalf("RDMAMGR_REQUIRE_IBVERBS=1 but Devices() = %v, %v", devs, err)
	}
	t.Skipf("no RDMA devices: %v", err)
	return nil
}

// testLogger shows warnings and errors of the backend on stderr.
func testLogger() *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("RDMAMGR_IBV_DEBUG") == "1" {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}
