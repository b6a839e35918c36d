package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/api"
)

// TestEveryCommandTakesOutput: every command a user can run takes -o
// (table or json) and refuses another format as bad usage.
func TestEveryCommandTakesOutput(t *testing.T) {
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	var walk func(cmds []*cli.Command, parent string)
	n := 0
	walk = func(cmds []*cli.Command, parent string) {
		for _, cmd := range cmds {
			name := strings.TrimSpace(parent + " " + cmd.Name)
			if cmd.Hidden {
				continue
			}
			if len(cmd.Subcommands) > 0 {
				walk(cmd.Subcommands, name)
				continue
			}
			n++
			has := false
			for _, f := range cmd.Flags {
				has = has || hasName(f, "output")
			}
			if !has {
				t.Errorf("wstream %s has no -o flag", name)
			}
			args := append(strings.Fields(name), "-o", "yaml")
			if code, out, errw := runArgs(args...); code != 2 || out != "" || !strings.Contains(errw, `-o "yaml"`) {
				t.Errorf("wstream %s: exit %d, stdout %q, stderr %q; want exit 2 and the bad format named", strings.Join(args, " "), code, out, errw)
			}
		}
	}
	walk(app.Commands, "")
	if n < 25 {
		t.Fatalf("only %d commands walked", n)
	}
}

// TestJSONOutputLocal runs the commands that need no cluster with -o json:
// each prints one JSON object with the fields it documents (REST's, for
// version: GET /v1/config's first fields).
func TestJSONOutputLocal(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("WSTREAM_CONFIG", filepath.Join(dir, "contexts.json"))
	cfgKeys := keysOfType(t, api.ConfigReply{})
	for _, c := range []struct {
		args []string
		keys []string // each in the object
		same []string // with these values
	}{
		{[]string{"version"}, []string{"version", "abi", "go"}, nil},
		{[]string{"completion", "fish"}, []string{"shell", "script"}, []string{"shell=fish"}},
		{[]string{"init", "--lang", "wat", "--dir", filepath.Join(dir, "proj"), "proj"}, []string{"name", "language", "dir", "files"}, []string{"name=proj", "language=wat"}},
		{[]string{"context", "add", "--nats", "nats://127.0.0.1:4222", "prod"}, []string{"command", "output"}, []string{"command=context add"}},
		{[]string{"context", "select", "prod"}, []string{"command", "output"}, []string{"command=context select"}},
		{[]string{"context", "ls"}, []string{"contexts"}, nil},
		{[]string{"context", "rm", "prod"}, []string{"command", "output"}, []string{"command=context rm"}},
	} {
		code, out, errw := runArgs(append(c.args, "-o", "json")...)
		var v map[string]any
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(&v); code != 0 || err != nil || dec.More() {
			t.Errorf("wstream %s -o json: exit %d, %v; want one JSON object\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), code, err, out, errw)
			continue
		}
		for _, k := range c.keys {
			if _, ok := v[k]; !ok {
				t.Errorf("wstream %s -o json: no %q in %s", strings.Join(c.args, " "), k, out)
			}
		}
		for _, kv := range c.same {
			k, want, _ := strings.Cut(kv, "=")
			if got, _ := v[k].(string); got != want {
				t.Errorf("wstream %s -o json: %s is %q, want %q", strings.Join(c.args, " "), k, got, want)
			}
		}
		if c.args[0] == "version" {
			for k := range v {
				if !cfgKeys[k] {
					t.Errorf("version -o json: %q is not a field of GET /v1/config", k)
				}
			}
		}
	}
}

// keysOfType lists the JSON keys v's type encodes to at the top level.
func keysOfType(t *testing.T, v any) map[string]bool {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{"commit": true} // omitted when unknown
	for k := range m {
		out[k] = true
	}
	return out
}
