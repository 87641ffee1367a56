package proc

import (
	"fmt"
	"os/exec"
)

// Build compiles the main package pkg (an import path, or a directory
// relative to the working directory) to the binary bin with go build.
func Build(pkg, bin string) error {
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return nil
}
