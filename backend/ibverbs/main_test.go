//go:build ibverbs

package ibverbs

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	if code == 0 {
		if leaks := waitNoLeaks(5 * time.Second); len(leaks) > 0 {
			fmt.Fprintf(os.Stderr, "goroutines of package ibverbs left after all tests:\n\n%s\n", strings.Join(leaks, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines returns the stacks of other goroutines with a frame in
// this package (the test helpers' own are excluded).
func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, s := range strings.Split(string(buf), "\n\n")[1:] {
		for _, f := range []string{"ibverbs.(*Backend)", "ibverbs.(*route)", "ibverbs.(*wsem)", "ibverbs.(*pendingRoute)"} {
			if strings.Contains(s, f) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func waitNoLeaks(d time.Duration) []string {
	end := time.Now().Add(d)
	for {
		leaks := leakedGoroutines()
		if len(leaks) == 0 || time.Now().After(end) {
			return leaks
		}
		time.Sleep(10 * time.Millisecond)
	}
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
