package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/testmod"
)

// upgradePlan is the wordcount's plan over a paced file source, with an
// exactly-once file sink; countStates, when set, declares the count
// state (the migrating wordcount's layout version 2).
func upgradePlan(t *testing.T, dir, name, input string, rate int, countStates string, withSplit bool) string {
	t.Helper()
	count := `{"id":"count","kind":"operator","operator":"count"` + countStates + `}`
	vertices := []string{
		fmt.Sprintf(`{"id":"source","kind":"source","connector":"file","config":{"path":%q,"rate":%d}}`, input, rate),
		`{"id":"split","kind":"operator","operator":"split"}`,
		count,
		`{"id":"sink","kind":"sink","connector":"file","config":{"path":"out"},"parallelism":1}`,
	}
	edges := `{"from":"source","to":"split","partition":"rebalance"},{"from":"split","to":"count","partition":"key"},`
	if !withSplit {
		vertices = append(vertices[:1], vertices[2:]...)
		edges = `{"from":"source","to":"count","partition":"key"},`
	}
	plan := fmt.Sprintf(`{"name":"wordcount","maxParallelism":128,"parallelism":2,"vertices":[%s],"edges":[%s{"from":"count","to":"sink","partition":"rebalance"}]}`,
		strings.Join(vertices, ","), edges)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUpgrade upgrades a running wordcount twice, at savepoint barriers:
// from the Go module to the Rust one at another parallelism, then to a Go
// wordcount whose count state has a new layout (version 2, decimal) that
// its wstream_migrate converts. Before them, an upgrade whose plan drops a
// vertex is refused and changes nothing. The committed counts must equal
// the test's own count of its input, exactly: nothing lost or repeated
// across the upgrades; checkpoint ids must strictly increase over the job's
// life, and its history must show both upgrades with their downtime.
func TestUpgrade(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// About 20 s of input at the source's pace: room for two upgrades,
	// whose modules the command compiles first, on a loaded machine.
	const lines, rate = 300_000, 15_000
	in := genWordInput(t, dir, lines, exactVocab, exactSeed)
	plan := upgradePlan(t, dir, "plan.json", in.path, rate, "", true)
	planV2 := upgradePlan(t, dir, "plan-v2.json", in.path, rate, `,"states":[{"name":"count","kind":"value","version":2}]`, true)
	refused := upgradePlan(t, dir, "plan-refused.json", in.path, rate, "", false)
	goWC := langModule(t, "go", "wordcount")
	rustWC := langModule(t, "rust", "wordcount")
	v2WC := testmod.GoModule(t, "examples/wasm/go/wordcountv2")
	bin := exactBin(t)

	run := startWS(t, bin, dir, "deploy", "-q", "--data", data, "--plan", plan, "--checkpoint-interval", "200ms", goWC)
	// past waits until a checkpoint of the job has every source past
	// share of the input, and returns the job's id.
	past := func(share float64) string {
		var job string
		run.until(t, fmt.Sprintf("a checkpoint past %.0f%% of the input", 100*share), func() bool {
			j, id := newestCheckpoint(data)
			if id == 0 {
				return false
			}
			lo, _, _, _, ok := checkpointSummary(t, data, j, id)
			job = j
			return ok && float64(lo) >= share*lines
		})
		return job
	}
	job := past(0.05)

	// A plan without vertex "split" is refused before anything stops.
	r := startWS(t, bin, dir, "upgrade", "--data", data, "--plan", refused, job, rustWC)
	if code := r.wait(t); code == 0 || !strings.Contains(r.stderr.String(), `vertex "split" (operator) of the running job is missing from the new plan`) {
		t.Fatalf("an upgrade that drops vertex split: exit %d\n%s", code, r.stderr.String())
	}
	if _, err := os.Stat(coordinator.UpgradesFile(data, job)); err == nil {
		t.Fatal("a refused upgrade entered the job's upgrade history")
	}

	up := startWS(t, bin, dir, "upgrade", "--data", data, "--plan", plan, "-p", "3", job, rustWC)
	up.mustSucceed(t)
	if out := up.stdout.String(); !strings.Contains(out, "upgraded to "+filepath.Base(rustWC)) || !strings.Contains(out, "downtime: ") {
		t.Fatalf("the first upgrade printed %q", out)
	}
	t.Logf("to Rust at p=3: %s", strings.TrimSpace(up.stdout.String()))
	past(0.3)

	up = startWS(t, bin, dir, "upgrade", "--data", data, "--plan", planV2, job, v2WC)
	up.mustSucceed(t)
	if out := up.stdout.String(); !strings.Contains(out, "migrated: count/count v1→v2") {
		t.Fatalf("the second upgrade printed %q", out)
	}
	t.Logf("to the version 2 layout: %s", strings.TrimSpace(up.stdout.String()))

	run.mustSucceed(t)
	if s := jobState(t, data, job); s != "finished" {
		t.Fatalf("job %s ended %s", job, s)
	}
	checkCounts(t, filepath.Join(dir, "out"), in, true)

	hist, err := coordinator.ReadHistory(data, job)
	if err != nil {
		t.Fatal(err)
	}
	attempts := map[int]bool{}
	for i, h := range hist {
		attempts[h.Attempt] = true
		if i > 0 && h.ID <= hist[i-1].ID {
			t.Errorf("checkpoint %d (%s, attempt %d) follows checkpoint %d in the history: ids must increase", h.ID, h.Kind, h.Attempt, hist[i-1].ID)
		}
	}
	if len(attempts) != 3 {
		t.Errorf("the history has checkpoints of attempts %v, want 0, 1 and 2", attempts)
	}
	ups, err := coordinator.ReadUpgrades(data, job)
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 2 || ups[0].Outcome != "done" || ups[1].Outcome != "done" || ups[0].NewSubtasks <= ups[0].OldSubtasks ||
		len(ups[1].Migrated) != 1 || ups[0].Savepoint >= ups[1].Savepoint {
		b, _ := json.Marshal(ups)
		t.Fatalf("upgrade history %s", b)
	}
	ck := runCLI(t, dir, "checkpoints", "--data", data, job)
	if ck.code != 0 || strings.Count(ck.stdout, " done ") != 2 {
		t.Fatalf("wstream checkpoints: exit %d\n%s%s", ck.code, ck.stdout, ck.stderr)
	}
}

// TestUpgradeRollsBack: an upgrade whose new module cannot restore (its
// plan raises the count state's layout version, and the module registers
// no migration for it) rolls back to the old module from the same
// savepoint; the command exits non-zero with the cause and the job's
// output stays exact. An upgrade to a module without wstream_migrate that
// would need it is refused before anything stops.
func TestUpgradeRollsBack(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const lines, rate = 200_000, 20_000
	in := genWordInput(t, dir, lines, exactVocab, exactSeed+1)
	plan := upgradePlan(t, dir, "plan.json", in.path, rate, "", true)
	planV2 := upgradePlan(t, dir, "plan-v2.json", in.path, rate, `,"states":[{"name":"count","kind":"value","version":2}]`, true)
	goWC := langModule(t, "go", "wordcount")
	rustWC := langModule(t, "rust", "wordcount")
	bin := exactBin(t)

	run := startWS(t, bin, dir, "deploy", "-q", "--data", data, "--plan", plan, "--checkpoint-interval", "200ms", goWC)
	var job string
	run.until(t, "a completed checkpoint", func() bool {
		var id int64
		job, id = newestCheckpoint(data)
		return id > 0
	})

	// The Rust wordcount exports no wstream_migrate: refused at once.
	r := startWS(t, bin, dir, "upgrade", "--data", data, "--plan", planV2, job, rustWC)
	if code := r.wait(t); code == 0 || !strings.Contains(r.stderr.String(), "does not export wstream_migrate") {
		t.Fatalf("an upgrade needing a migration the module lacks: exit %d\n%s", code, r.stderr.String())
	}

	// The Go wordcount exports it (the SDK does) but registers no
	// migration: the restore fails on the workers, and the old module runs
	// again.
	r = startWS(t, bin, dir, "upgrade", "--data", data, "--plan", planV2, job, goWC)
	code := r.wait(t)
	msg := r.stderr.String()
	if code == 0 || !strings.Contains(msg, "upgrade rolled back") || !strings.Contains(msg, `no migration registered for state "count" of operator "count"`) {
		t.Fatalf("an upgrade whose restore fails: exit %d\n%s", code, msg)
	}
	t.Logf("rolled back: %s", strings.TrimSpace(msg))

	run.mustSucceed(t)
	if s := jobState(t, data, job); s != "finished" {
		t.Fatalf("job %s ended %s", job, s)
	}
	checkCounts(t, filepath.Join(dir, "out"), in, true)
	ups, err := coordinator.ReadUpgrades(data, job)
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Outcome != "rolled back" || ups[0].Attempt != 2 || !strings.Contains(ups[0].Cause, "no migration registered") {
		b, _ := json.Marshal(ups)
		t.Fatalf("upgrade history %s", b)
	}
	rec, err := coordinator.ReadRecord(data, job)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Attempt != 2 || !strings.Contains(string(rec.Plan), `"operator": "count"`) || strings.Contains(string(rec.Plan), `"version"`) {
		t.Fatalf("the job's record after the roll-back: attempt %d, plan %s", rec.Attempt, rec.Plan)
	}
}
