package testkit_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

const prefix = "github.com/wstream/wstream/internal/testkit"

// TestProductionImportsNoHarness checks the non-test build of every package
// outside internal/testkit (cmd included): a harness linked into the binary
// would carry test servers and build tools to users.
func TestProductionImportsNoHarness(t *testing.T) {
	cmd := exec.Command("go", "list",
		"-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = testmod.Root()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || isHarness(fields[0]) {
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			if isHarness(dep) {
				t.Errorf("%s imports the test harness %s", fields[0], dep)
			}
		}
	}
	// The module has dozens of production packages; a handful means go list
	// saw the wrong directory and the check proved nothing.
	if checked < 20 {
		t.Fatalf("only %d production packages listed", checked)
	}
}

func isHarness(path string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}
