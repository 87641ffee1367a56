package bench

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// probeSink keeps BenchmarkInstrProbe's work from being optimised away.
var probeSink uint64

// probeStep is BenchmarkInstrProbe's operation: a function of its own, so
// bench/instr.sh has a name to report.
//
//go:noinline
func probeStep(x uint64) uint64 { return x*2654435761 + 1 }

// BenchmarkInstrProbe is the benchmark TestInstrScript measures: one call
// of probeStep per iteration.
func BenchmarkInstrProbe(b *testing.B) {
	b.Run("step", func(b *testing.B) {
		for i := range b.N {
			probeSink = probeStep(probeSink + uint64(i))
		}
	})
}

// TestInstrScript: bench/instr.sh refuses bad arguments with exit 2 and,
// where valgrind is installed, reports the probe's own function with a
// small positive count of instructions per operation and a total at
// least as large.
func TestInstrScript(t *testing.T) {
	sh := filepath.Join("instr.sh")
	for _, args := range [][]string{{}, {"--n", "0", ".", "X"}, {"--bogus", ".", "X"}, {"."}} {
		cmd := exec.Command("bash", append([]string{sh}, args...)...)
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Fatalf("instr.sh %q: %v, want exit status 2", args, err)
		}
	}
	needTools(t, "valgrind", "callgrind_annotate", "python3")
	out := script(t, nil, sh, "--n", "200000", ".", "InstrProbe/step")
	step := regexp.MustCompile(`\| ([0-9.]+) \| [^|]*bench\.probeStep \|`).FindStringSubmatch(out)
	total := regexp.MustCompile(`\| ([0-9.]+) \| total \|`).FindStringSubmatch(out)
	if step == nil || total == nil {
		t.Fatalf("instr.sh: no probeStep or total row:\n%s", out)
	}
	s, _ := strconv.ParseFloat(step[1], 64)
	tot, _ := strconv.ParseFloat(total[1], 64)
	if s < 1 || s > 20 || tot < s {
		t.Fatalf("instr.sh: probeStep %.1f, total %.1f instructions per operation; want 1..20 and total >= it:\n%s", s, tot, out)
	}
}
