package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// wstreamBin builds the CLI once per test process.
func wstreamBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wstream-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "wstream")
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		cmd := exec.Command(goBin, "build", "-o", binPath, "./cmd/wstream")
		cmd.Dir = testmod.Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/wstream: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs wstream with args in dir and returns its output and exit code.
func runCLI(t *testing.T, dir string, args ...string) result {
	t.Helper()
	return runWith(t, dir, nil, 3*time.Minute, args...)
}

// runWith runs wstream with args in dir, with env added to the
// environment, and fails the test when it does not end within timeout.
func runWith(t *testing.T, dir string, env []string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, wstreamBin(t), args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running wstream %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("wstream %v did not finish in time; stderr:\n%s", args, se.String())
	}
	return result{stdout: so.String(), stderr: se.String(), code: code}
}

// sortedLines returns the non-empty lines of s, sorted.
func sortedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

func module(t *testing.T, name string) string {
	return testmod.GoModule(t, "examples/wasm/go/"+name)
}

// writePlan writes plan to dir/plan.json.
func writePlan(t *testing.T, dir, plan string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
}

// referenceOutput runs plan with module mod once, undisturbed, and returns
// the sorted lines its file sink committed under out/: what every disturbed
// run of the plan must commit too.
func referenceOutput(t *testing.T, mod, plan string) []string {
	t.Helper()
	ref := t.TempDir()
	writePlan(t, ref, plan)
	if r := runCLI(t, ref, "deploy", "-q", "--plan", "plan.json", mod); r.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.code, r.stderr)
	}
	return committed(t, filepath.Join(ref, "out"))
}
