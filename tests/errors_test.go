package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// minimal is a WAT operator module with every required export; parts of it
// are swapped out to make each bad-module case.
const minimalWAT = `(module
  (memory (export "memory") 1)
  (func (export "wstream_abi_version") (result i32) (i32.const %VERSION%))
  (func (export "wstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_process") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))
  %CLOSE%
  %EXTRA%
)`

func wat(t *testing.T, version, close, extra string) []byte {
	if close == "" {
		close = `(func (export "wstream_close") (param i32) (result i32) (i32.const 0))`
	}
	src := strings.NewReplacer("%VERSION%", version, "%CLOSE%", close, "%EXTRA%", extra).Replace(minimalWAT)
	return testmod.WAT(t, src)
}

const planFlag = `{"name":"t","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":10}},
 {"id":"op","kind":"operator","operator":"identity"},
 {"id":"out","kind":"sink","connector":"stdout"}],
 "edges":[{"from":"src","to":"op"},{"from":"op","to":"out"}]}`

// TestBadModules checks that each kind of bad module is refused at deploy
// with an error that names the problem, and a non-zero exit.
func TestBadModules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(planFlag), 0o644); err != nil {
		t.Fatal(err)
	}
	good := wat(t, "1", "", "")
	cases := []struct {
		name string
		wasm []byte
		want []string
	}{
		{"not wasm", []byte("#!/bin/sh\necho hello\n"), []string{"not a WebAssembly"}},
		{"truncated", good[:len(good)-7], []string{"m.wasm"}},
		{"missing export", wat(t, "1", " ", ""), []string{"wstream_close"}},
		{"abi mismatch", wat(t, "2", "", ""), []string{"ABI", "2", "1"}},
		{"unknown import module", testmod.WAT(t, strings.Replace(strings.NewReplacer("%VERSION%", "1", "%CLOSE%", `(func (export "wstream_close") (param i32) (result i32) (i32.const 0))`, "%EXTRA%", "").Replace(minimalWAT),
			"(module", `(module (import "env" "socket" (func (param i32) (result i32))) `, 1)), []string{"env", "socket"}},
		{"unknown wstream import", testmod.WAT(t, strings.Replace(strings.NewReplacer("%VERSION%", "1", "%CLOSE%", `(func (export "wstream_close") (param i32) (result i32) (i32.const 0))`, "%EXTRA%", "").Replace(minimalWAT),
			"(module", `(module (import "wstream" "open_file" (func (param i32) (result i32))) `, 1)), []string{"open_file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "m.wasm")
			if err := os.WriteFile(path, c.wasm, 0o644); err != nil {
				t.Fatal(err)
			}
			r := runCLI(t, dir, "deploy", "--plan", "plan.json", "m.wasm")
			if r.code == 0 {
				t.Fatalf("deploy of a bad module exited 0\nstdout:\n%s", r.stdout)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Fatalf("error does not mention %q:\n%s", w, r.stderr)
				}
			}
			if r.stdout != "" {
				t.Fatalf("a refused deploy printed output: %q", r.stdout)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		r := runCLI(t, dir, "deploy", "--plan", "plan.json", "nope.wasm")
		if r.code == 0 || !strings.Contains(r.stderr, "nope.wasm") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("no plan", func(t *testing.T) {
		path := filepath.Join(dir, "m.wasm")
		_ = os.WriteFile(path, good, 0o644)
		r := runCLI(t, dir, "deploy", "m.wasm")
		if r.code == 0 || !strings.Contains(r.stderr, "--plan") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// TestGuestFailures runs the testops module: a trap, an error, a call that
// never returns, and a guest that outgrows its memory all fail the job with
// the operator, the subtask and what went wrong, and a non-zero exit.
func TestGuestFailures(t *testing.T) {
	mod := module(t, "testops")
	dir := t.TempDir()
	plan := func(op, cfg string) string {
		p := `{"name":"t","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":200,"keys":50}},
 {"id":"victim","kind":"operator","operator":"` + op + `","config":` + cfg + `},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"victim"},{"from":"victim","to":"out"}]}`
		path := filepath.Join(dir, op+".json")
		if err := os.WriteFile(path, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		op, cfg string
		flags   []string
		want    []string
	}{
		{"trap", `{"on":"w7"}`, nil, []string{"victim", "subtask 0", "w7"}},
		{"fail", `{"on":"w7"}`, nil, []string{"victim", "subtask 0", "w7"}},
		{"sleep", `{"on":"w7"}`, []string{"--call-timeout", "300ms"}, []string{"victim", "subtask 0", "300ms"}},
		{"grow", `{"mb":128}`, []string{"--memory-limit", "32"}, []string{"victim", "subtask 0", "memory"}},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			args := append([]string{"deploy", "--plan", plan(c.op, c.cfg)}, c.flags...)
			r := runCLI(t, dir, append(args, mod)...)
			if r.code == 0 {
				t.Fatalf("job with a failing guest exited 0\nstderr:\n%s", r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Fatalf("error does not mention %q:\n%s", w, r.stderr)
				}
			}
			if !strings.Contains(r.stderr, "failed") {
				t.Fatalf("no failure summary:\n%s", r.stderr)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	mod := module(t, "wordcount")
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"deploy", "-p", "0", mod}, "--parallelism"},
		{[]string{"deploy", "--vertex-parallelism", "count", mod}, "--vertex-parallelism"},
		{[]string{"deploy", "--vertex-parallelism", "nosuch=2", mod}, "nosuch"},
		{[]string{"deploy", "--source", "kafka:topic=x", mod}, "kafka"},
		{[]string{"deploy", "--source", "gen:bogus=1", mod}, "bogus"},
		{[]string{"deploy", "--memory-limit", "0", mod}, "--memory-limit"},
		{[]string{"deploy"}, "MODULE"},
		{[]string{"deploy", "--no-such-flag", mod}, "no-such-flag"},
		{[]string{"deploy", "-p", "200", mod}, "parallelism"},
	}
	for _, c := range cases {
		r := runCLI(t, dir, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("wstream %v: exit %d, stderr %q; want non-zero and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, dir, "version")
	if r.code != 0 || !strings.Contains(r.stdout, "ABI v1") {
		t.Fatalf("version: %d %q", r.code, r.stdout)
	}
	r = runCLI(t, dir, "deploy", "--help")
	for _, f := range []string{"--plan", "--parallelism", "--source", "--sink", "--memory-limit", "--call-timeout", "--data", "--nats", "--dry-run"} {
		if !strings.Contains(r.stdout, f) {
			t.Errorf("deploy --help does not document %s", f)
		}
	}
}
