package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func runArgs(args ...string) (int, string, string) {
	var out, errw bytes.Buffer
	code := run(append([]string{"wstream"}, args...), &out, &errw)
	return code, out.String(), errw.String()
}

func TestUnknownCommand(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"deplyo", `did you mean "deploy"?`},
		{"lsit", `did you mean "list"?`},
		{"chekpoints", `did you mean "checkpoints"?`},
		{"frobnicate", `"frobnicate" is not a wstream command (see wstream --help)`},
	} {
		code, out, errw := runArgs(c.arg)
		if code != 2 || !strings.Contains(errw, c.want) || strings.Count(errw, "\n") != 1 || out != "" {
			t.Errorf("wstream %s: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.arg, code, out, errw, c.want)
		}
	}
}

func TestVersionFlags(t *testing.T) {
	code, out, _ := runArgs("--version")
	if code != 0 || !strings.Contains(out, "wstream version") {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
	// -v is verbose, not the version: alone it is a flag with no command.
	code, out, _ = runArgs("-v", "version")
	if code != 0 || !strings.Contains(out, "ABI v") {
		t.Fatalf("-v version: exit %d, %q", code, out)
	}
}

// TestOneDefaultPerFlag: no flag's help shows two defaults.
func TestOneDefaultPerFlag(t *testing.T) {
	two := regexp.MustCompile(`\(default.*\(default`)
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	for _, cmd := range app.Commands {
		code, out, errw := runArgs(cmd.Name, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d\n%s", cmd.Name, code, errw)
		}
		for _, l := range strings.Split(out, "\n") {
			if two.MatchString(l) {
				t.Errorf("%s --help: %s", cmd.Name, strings.TrimSpace(l))
			}
		}
	}
	_, out, _ := runArgs("deploy", "--help")
	if !strings.Contains(out, "(default: 10m)") || !strings.Contains(out, "(default: the plan's, else 128)") {
		t.Fatalf("deploy --help lost the defaults written in usage texts:\n%s", out)
	}
}

// TestDataFromEnvironment: WSTREAM_DATA stands for --data.
func TestDataFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("WSTREAM_DATA", dir)
	code, _, errw := runArgs("checkpoints")
	if code != 1 || !strings.Contains(errw, "no job in "+dir) {
		t.Fatalf("checkpoints with WSTREAM_DATA=%s: exit %d\n%s", dir, code, errw)
	}
}

// TestFlagsAfterArguments: flags after a command's arguments are read as
// flags, with their values.
func TestFlagsAfterArguments(t *testing.T) {
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	for _, c := range []struct{ in, want string }{
		{"wstream deploy m.wasm --dry-run -p 3", "wstream deploy --dry-run -p 3 m.wasm"},
		{"wstream -v deploy m.wasm --plan p.json", "wstream -v deploy --plan p.json m.wasm"},
		{"wstream deploy --plan=p.json m.wasm -q", "wstream deploy --plan=p.json -q m.wasm"},
		{"wstream savepoint JOB DIR --nats u", "wstream savepoint --nats u JOB DIR"},
		{"wstream inspect DIR -- -odd", "wstream inspect DIR -- -odd"},
		{"wstream deploy --resume -", "wstream deploy --resume -"},
		{"wstream nosuch a -b", "wstream nosuch a -b"},
	} {
		got := strings.Join(flagsFirst(app, strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.in, got, c.want)
		}
	}
	code, out, errw := runArgs("deploy", "no-such.wasm", "--dry-run")
	if code != 1 || !strings.Contains(errw, "no-such.wasm") || strings.Contains(errw, "got 2") {
		t.Fatalf("deploy MODULE --dry-run: exit %d\n%s%s", code, out, errw)
	}
}
