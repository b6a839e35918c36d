package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
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
		if cmd.Hidden {
			continue
		}
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

// TestFlagCategories: deploy's help groups its flags, and leaves none
// outside a group.
func TestFlagCategories(t *testing.T) {
	_, out, _ := runArgs("deploy", "--help")
	for _, cat := range []string{"Job and plan", "Where to start", "Checkpoints", "Restarts", "Sandbox limits", "Cluster and data", "Output"} {
		if !strings.Contains(out, "   "+cat+"\n") {
			t.Errorf("deploy --help has no %q group", cat)
		}
	}
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	for _, cmd := range app.Commands {
		if cmd.Name != "deploy" {
			continue
		}
		for _, f := range cmd.Flags {
			if cf, ok := f.(cli.CategorizableFlag); !ok || cf.GetCategory() == "" {
				t.Errorf("deploy flag --%s is in no group", f.Names()[0])
			}
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 198394: "193.7KiB", 5 << 20: "5.0MiB", 3 << 40: "3.0TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
