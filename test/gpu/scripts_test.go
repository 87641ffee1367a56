package gpu

import (
	"os/exec"
	"testing"
)

// TestScriptsParse: the device scripts are valid bash (they run only
// where a GPU is, so a syntax error would cost a device session).
func TestScriptsParse(t *testing.T) {
	for _, f := range []string{"run.sh", "device.sh", "oprate.sh", "ab.sh"} {
		if out, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", f, err, out)
		}
	}
}
