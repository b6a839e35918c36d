package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// commandsOf lists the commands `wstream [CMD] --help` shows.
func commandsOf(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	r := runCLI(t, dir, append(args, "--help")...)
	if r.code != 0 {
		t.Fatalf("%v --help: exit %d", args, r.code)
	}
	_, list, ok := strings.Cut(r.stdout, "COMMANDS:\n")
	if !ok {
		return nil
	}
	var cmds []string
	for _, l := range strings.Split(list, "\n") {
		if !strings.HasPrefix(l, "   ") {
			break
		}
		name := strings.TrimSuffix(strings.Fields(l)[0], ",")
		if name != "help" {
			cmds = append(cmds, name)
		}
	}
	return cmds
}

// TestExitCodeUsage: every command and subcommand answers a flag it does
// not have, or a value its flag cannot take, with exit 2 and one line that
// points to its --help, not the help itself.
func TestExitCodeUsage(t *testing.T) {
	dir := t.TempDir()
	env := []string{"WSTREAM_CONFIG=" + filepath.Join(dir, "contexts.json")}
	var all [][]string
	for _, c := range commandsOf(t, dir) {
		all = append(all, []string{c})
		for _, sub := range commandsOf(t, dir, c) {
			all = append(all, []string{c, sub})
		}
	}
	if len(all) < 20 {
		t.Fatalf("only %d commands found: %v", len(all), all)
	}
	check := func(args []string, want string) {
		t.Helper()
		r := runWith(t, dir, env, time.Minute, args...)
		if r.code != 2 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("wstream %s: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, want)
		}
	}
	for _, cmd := range all {
		name := strings.Join(cmd, " ")
		check(append(cmd, "--no-such-flag"), "no flag --no-such-flag (see wstream "+name+" --help)")
	}
	check([]string{"--no-such-flag"}, "wstream: no flag --no-such-flag (see wstream --help)")
	check([]string{"deploy", "--checkpoint-interval", "5", "x.wasm"}, "--checkpoint-interval 5: want a duration with its unit")
	check([]string{"deploy", "-p", "four", "x.wasm"}, "-p four: want a whole number")
	check([]string{"deploy", "--checkpoint-interval", "-1s", "x.wasm"}, "--checkpoint-interval -1s: must not be negative")
	check([]string{"deploy", "-d", "x.wasm"}, "--detach goes with --nats")
	check([]string{"list", "-o", "yaml"}, `-o "yaml"`)
	check([]string{"tenant", "ls"}, `"ls" is not a wstream tenant command; did you mean "list"?`)
	check([]string{"lsit"}, `did you mean "list"?`)
}

// TestExitCodes runs each command once the way it fails and, where that
// needs no cluster, the way it succeeds; TestExitCodesCluster does the rest
// against a server.
func TestExitCodes(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	env := []string{"WSTREAM_CONFIG=" + filepath.Join(dir, "contexts.json")}
	writePlan(t, dir, `{"name":"small","vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":50,"words":2}},
 {"id":"upper","kind":"operator","operator":"upper"},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"upper"},{"from":"upper","to":"out"}]}`)
	if err := os.WriteFile(filepath.Join(dir, "fails.json"), []byte(`{"name":"fails","vertices":[
 {"id":"src","kind":"source","connector":"file","config":{"path":"gone.txt"}},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"out"}],"restart":{"strategy":"none"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gone.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noJob := "no wstream is running with data directory"
	covered := map[string]bool{}
	defer func() {
		// Every command and subcommand is in this table or in
		// TestExitCodesCluster's.
		for _, c := range commandsOf(t, dir) {
			subs := commandsOf(t, dir, c)
			if len(subs) == 0 && !covered[c] && !clusterCovered[c] {
				t.Errorf("wstream %s has no exit-code case", c)
			}
			for _, sub := range subs {
				if name := c + " " + sub; !covered[name] && !clusterCovered[name] {
					t.Errorf("wstream %s has no exit-code case", name)
				}
			}
		}
	}()
	for _, c := range []struct {
		args []string
		code int
		want string // in stderr (or stdout for 0)
	}{
		{[]string{"version"}, 0, "ABI v"},
		{[]string{"completion", "bash"}, 0, "_wstream_complete"},
		{[]string{"context", "ls"}, 0, "NAME"},
		{[]string{"context", "select", "nope"}, 1, `no context "nope"`},
		{[]string{"context", "rm"}, 2, "want one NAME"},
		{[]string{"init"}, 2, "NAME"},
		{[]string{"build", "nowhere"}, 1, "not a wstream project"},
		{[]string{"deploy", "-q", "--plan", "plan.json", mod}, 0, ""},
		{[]string{"deploy", "--dry-run", "--plan", "plan.json", mod}, 0, "src"},
		{[]string{"deploy", "/nope.wasm"}, 1, "/nope.wasm"},
		{[]string{"deploy", "--plan", "plan.json", "--from-savepoint", "/nope", mod}, 1, "--from-savepoint /nope: no such savepoint or checkpoint directory"},
		{[]string{"deploy"}, 2, "want exactly one MODULE.wasm"},
		{[]string{"follow"}, 2, "want one JOB"},
		{[]string{"follow", "x"}, 1, noJob},
		{[]string{"list"}, 1, noJob},
		{[]string{"workers"}, 1, noJob},
		{[]string{"checkpoints", "--data", "empty"}, 1, "no job in empty"},
		{[]string{"cancel"}, 2, "want one JOB"},
		{[]string{"cancel", "x"}, 1, noJob},
		{[]string{"savepoint"}, 2, "want JOB [DIR]"},
		{[]string{"savepoint", "x"}, 1, noJob},
		{[]string{"stop", "x"}, 1, noJob},
		{[]string{"upgrade", "x"}, 2, "want JOB NEW.wasm"},
		{[]string{"inspect"}, 2, "want one DIR"},
		{[]string{"inspect", "/nope"}, 1, "/nope"},
		{[]string{"tenant", "add"}, 2, "one argument"},
		{[]string{"worker"}, 2, "--nats URL is required"},
		{[]string{"server", "--replicas", "9"}, 2, "--replicas 9"},
		{[]string{"context", "add", "--data", "d", "dev"}, 0, "context dev saved"},
		{[]string{"context", "add", "dev2"}, 2, "give at least one setting"},
		{[]string{"init", "--lang", "wat", "--dir", "proj", "proj"}, 0, "created"},
		{[]string{"completion", "tcsh"}, 2, `got "tcsh"`},
		{[]string{"upgrade", "x", "/nope.wasm"}, 1, "/nope.wasm"},
		{[]string{"tenant", "init", "--data", "td"}, 0, "tenant authority"},
		{[]string{"tenant", "list"}, 1, noJob},
		{[]string{"tenant", "creds", "acme"}, 1, noJob},
		{[]string{"tenant", "update"}, 2, "one argument"},
		{[]string{"tenant", "remove", "acme"}, 1, noJob},
		{[]string{"tenant", "worker-creds"}, 2, "one argument"},
		{[]string{"tenant", "worker-revoke", "w9"}, 1, noJob},
	} {
		covered[strings.Join(c.args[:min(len(c.args), 2)], " ")] = true
		covered[c.args[0]] = true
		r := runWith(t, dir, env, 3*time.Minute, c.args...)
		out := r.stderr
		if c.code == 0 {
			out = r.stdout + r.stderr
		}
		if r.code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("wstream %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), r.code, c.code, c.want, r.stdout, r.stderr)
		}
		if c.code != 0 && strings.Count(r.stderr, c.want) > 1 {
			t.Errorf("wstream %s: the error is printed more than once:\n%s", strings.Join(c.args, " "), r.stderr)
		}
	}
	// A job that fails: exit 1, its error once.
	if err := os.Remove(filepath.Join(dir, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, dir, "deploy", "--plan", "fails.json", mod)
	if r.code != 1 || strings.Count(r.stderr, "gone.txt") != 1 {
		t.Errorf("deploy of a failing job: exit %d, want 1 and its error once:\n%s", r.code, r.stderr)
	}
}

// TestExitCodesCluster: the commands that act on a cluster's jobs, against
// a server: a job ended from outside makes its deploy exit 3, cancel of an
// ended job fails, stop of no job says so.
func TestExitCodesCluster(t *testing.T) {
	mod := module(t, "mapfilter")
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	writePlan(t, dir, endlessPlan)
	cli := func(args ...string) result {
		t.Helper()
		return runCLI(t, dir, append(args, srv.args()...)...)
	}
	for _, args := range [][]string{{"list"}, {"workers"}} {
		if r := cli(args...); r.code != 0 {
			t.Errorf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	r := cli("stop", "nope")
	if r.code != 1 || !strings.Contains(r.stderr, `no job "nope"`) || strings.Contains(r.stderr, "goes on running") {
		t.Errorf("stop nope: exit %d\n%s", r.code, r.stderr)
	}
	if r := cli("follow", "nope"); r.code != 1 || !strings.Contains(r.stderr, `no job "nope"`) {
		t.Errorf("follow nope: exit %d\n%s", r.code, r.stderr)
	}

	// A deploy whose job is cancelled from outside exits 3.
	d := startEdge(t, dir, append([]string{"deploy", "--plan", "plan.json", mod}, srv.args()...)...)
	var id string
	running := regexp.MustCompile(`job (\S+) running`)
	clusterPoll(t, time.Minute, "deploy did not start the job", func() bool {
		if m := running.FindStringSubmatch(d.stderr.String()); m != nil {
			id = m[1]
			return true
		}
		return d.exited()
	})
	if id == "" {
		t.Fatalf("deploy exited: %s", d.stderr.String())
	}
	clusterPoll(t, time.Minute, "the job does not run", func() bool { return srv.jobState(t, dir, id) == "RUNNING" })
	if r := cli("savepoint", id, filepath.Join(dir, "sps")); r.code != 0 {
		t.Errorf("savepoint: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, dir, "checkpoints", "--data", srv.data, id); r.code != 0 {
		t.Errorf("checkpoints: exit %d\n%s", r.code, r.stderr)
	}
	sps, _ := filepath.Glob(filepath.Join(dir, "sps", "savepoint-*"))
	if len(sps) != 1 {
		t.Fatalf("savepoints in sps: %v", sps)
	}
	if r := runCLI(t, dir, "inspect", sps[0]); r.code != 0 {
		t.Errorf("inspect: exit %d\n%s", r.code, r.stderr)
	}
	if r := cli("upgrade", "--plan", "plan.json", id, mod); r.code != 0 || !strings.Contains(r.stdout, "upgraded") {
		t.Errorf("upgrade: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := cli("cancel", id); r.code != 0 {
		t.Fatalf("cancel: exit %d\n%s", r.code, r.stderr)
	}
	if code := d.wait(t, 2*time.Minute); code != 3 || !strings.Contains(d.stderr.String(), "canceled from outside") {
		t.Errorf("deploy of a job cancelled from outside: exit %d, want 3\n%s", code, d.stderr.String())
	}
	r = cli("cancel", id)
	if r.code != 1 || !strings.Contains(r.stderr, "has already ended (CANCELED)") {
		t.Errorf("cancel of an ended job: exit %d, want 1\n%s", r.code, r.stderr)
	}
	// follow of an ended job: its outcome at once.
	if r := cli("follow", id); r.code != 3 {
		t.Errorf("follow of a cancelled job: exit %d, want 3\n%s", r.code, r.stderr)
	}

	// A job stopped with a savepoint from outside: exit 3 as well; one that
	// finishes: 0.
	r = cli("deploy", "-d", "--plan", "plan.json", mod)
	if r.code != 0 {
		t.Fatalf("deploy -d: exit %d\n%s", r.code, r.stderr)
	}
	id = strings.TrimSpace(r.stdout)
	clusterPoll(t, time.Minute, "the job does not run", func() bool { return srv.jobState(t, dir, id) == "RUNNING" })
	if r := cli("stop", id); r.code != 0 {
		t.Fatalf("stop: exit %d\n%s", r.code, r.stderr)
	}
	if r := cli("follow", id); r.code != 3 || !strings.Contains(r.stderr, "stopped with a savepoint from outside") {
		t.Errorf("follow of a stopped job: exit %d, want 3\n%s", r.code, r.stderr)
	}
	writePlan(t, dir, strings.Replace(strings.Replace(endlessPlan, `"count":0,"rate":200`, `"count":100`, 1), `"name":"endless"`, `"name":"bounded"`, 1))
	if r := cli("deploy", "--plan", "plan.json", mod); r.code != 0 || !strings.Contains(r.stderr, "records in: 100") {
		t.Errorf("deploy of a bounded job: exit %d, want 0\n%s", r.code, r.stderr)
	}

	// The tenant commands, as the cluster's admin.
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"tenant", "add", "acme"}, 0},
		{[]string{"tenant", "add", "acme"}, 1}, // there already
		{[]string{"tenant", "list"}, 0},
		{[]string{"tenant", "creds", "acme"}, 0},
		{[]string{"tenant", "update", "--jobs", "2", "acme"}, 0},
		{[]string{"tenant", "worker-creds", "w2"}, 0},
		{[]string{"tenant", "worker-revoke", "w2"}, 0},
		{[]string{"tenant", "remove", "acme"}, 0},
		{[]string{"tenant", "remove", "acme"}, 1}, // gone
	} {
		if r := cli(c.args...); r.code != c.code {
			t.Errorf("wstream %s: exit %d, want %d\n%s", strings.Join(c.args, " "), r.code, c.code, r.stderr)
		}
	}

	// A worker and the server end at SIGTERM with 0.
	if r := cli("tenant", "worker-creds", "w3"); r.code != 0 {
		t.Fatalf("tenant worker-creds w3: exit %d\n%s", r.code, r.stderr)
	}
	w := startEdge(t, dir, "worker", "--nats", srv.url, "--nats-creds", filepath.Join(dir, "w3.creds"), "--id", "w3")
	clusterPoll(t, time.Minute, "the worker did not connect", func() bool {
		return strings.Contains(w.stderr.String(), "connected to") || w.exited()
	})
	for _, p := range []*edgeProc{w, srv.proc} {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Errorf("%v after SIGTERM: exit %d, want 0\n%s", p.cmd.Args, code, p.stderr.String())
		}
	}
}

// clusterCovered are the commands TestExitCodesCluster runs.
var clusterCovered = map[string]bool{
	"list": true, "workers": true, "stop": true, "follow": true, "deploy": true, "savepoint": true, "checkpoints": true,
	"inspect": true, "upgrade": true, "cancel": true, "server": true, "worker": true,
	"tenant add": true, "tenant list": true, "tenant creds": true, "tenant update": true, "tenant worker-creds": true,
	"tenant worker-revoke": true, "tenant remove": true,
}
