package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The example builds and runs on each backend (as a program: two
// protoactor remotes in one process race under -race, in protoactor's
// own logging).
func TestRendezvous(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example")
	}
	exe := filepath.Join(t.TempDir(), "rendezvous")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			out, err := exec.Command(exe, "-backend", kind).CombinedOutput()
			if err != nil {
				t.Fatalf("rendezvous -backend %s: %v\n%s", kind, err, out)
			}
			for _, want := range []string{"route: " + kind, "rendezvous: 16 messages", "counter: 5000", `message: "hello, recv" with imm 7`} {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

var backends = []string{"shm", "tcp"}
