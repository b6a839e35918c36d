package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wstream/wstream/transport"
)

// TestNoJobIsOneAnswer: whatever bolt asks of acme's job, it is answered
// exactly as for a job that never was, and every refusal is in the audit
// log once, with that answer.
func TestNoJobIsOneAnswer(t *testing.T) {
	cc := startClockedCoordinator(t)
	c := cc.c
	cc.silentWorker(t, "w1", nil)
	addJob(t, c, "a-1", "acme", statusPlan)
	bolt := Caller{Tenant: "bolt", User: "Ubolt"}

	asks := map[string]func(id string) string{
		"savepoint": func(id string) string {
			var rep transport.SavepointReply
			c.Savepoint(bolt, transport.SavepointRequest{JobID: id}, func(r transport.SavepointReply) { rep = r })
			return rep.Error
		},
		"stop with savepoint": func(id string) string {
			var rep transport.SavepointReply
			c.Savepoint(bolt, transport.SavepointRequest{JobID: id, Stop: true, Drain: true}, func(r transport.SavepointReply) { rep = r })
			return rep.Error
		},
		"cancel": func(id string) string { return errText(c.Cancel(bolt, id)) },
		"upgrade": func(id string) string {
			err := c.upgrade(transport.UpgradeRequest{JobID: id, Plan: json.RawMessage(statusPlan)}, bolt.internal(), nil)
			return errText(c.outcome(bolt.internal(), "upgrade", id, err))
		},
		"job":         func(id string) string { _, err := c.Job(bolt, id); return errText(err) },
		"vertex":      func(id string) string { _, err := c.Vertex(bolt, id, "src"); return errText(err) },
		"checkpoints": func(id string) string { _, err := c.Checkpoints(bolt, id); return errText(err) },
		"history":     func(id string) string { _, err := c.CheckpointHistory(bolt, id, 0); return errText(err) },
		"summary":     func(id string) string { _, err := c.CheckpointSummary(bolt, id); return errText(err) },
		"checkpoint":  func(id string) string { _, err := c.Checkpoint(bolt, id, 1); return errText(err) },
		"exceptions":  func(id string) string { _, err := c.Exceptions(bolt, id); return errText(err) },
	}
	for name, ask := range asks {
		theirs, none := ask("a-1"), ask("a-2")
		if theirs != `no job "a-1"` || none != `no job "a-2"` {
			t.Errorf("bolt's %s: %q of acme's job and %q of none, want no job and the id", name, theirs, none)
		}
	}
	b, err := os.ReadFile(AuditFile(c.cfg.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	audit := string(b)
	for _, action := range []string{"savepoint", "stop with savepoint", "cancel", "upgrade"} {
		for _, id := range []string{"a-1", "a-2"} {
			line := fmt.Sprintf(`"tenant":"bolt","user":"Ubolt","action":%q,"job":%q,"error":"no job \"%s\""}`, action, id, id)
			if n := strings.Count(audit, line); n != 1 {
				t.Errorf("bolt's %s of %s is audited %d times with its error, want once:\n%s", action, id, n, audit)
			}
		}
	}
	if strings.Contains(audit, `"tenant":"bolt","user":"Ubolt","action":"savepoint","job":"a-1"}`) {
		t.Errorf("a refused savepoint is audited as done:\n%s", audit)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestTenantAnswersNameNoServerPath: a tenant's answers say where under its
// own area, and nothing of the rest of the data directory; the admin's
// keep the paths; the reworded error is still what it was.
func TestTenantAnswersNameNoServerPath(t *testing.T) {
	data := t.TempDir()
	c := &Coordinator{cfg: Config{DataDir: data}}
	acme := caller{tenant: "acme"}
	sp := filepath.Join(data, "tenants", "acme", "savepoints", "savepoint-a-1-3")
	jobs := filepath.Join(data, "jobs", "b-1", "checkpoints")
	err := fmt.Errorf("writing savepoint %s: %w", sp, fmt.Errorf("open %s: %w", jobs, os.ErrPermission))
	got := c.forCaller(acme, err)
	if want := "writing savepoint <acme's area>/savepoints/savepoint-a-1-3: open <server data>/jobs/b-1/checkpoints: permission denied"; got.Error() != want {
		t.Errorf("acme is told %q, want %q", got, want)
	}
	if !errors.Is(got, os.ErrPermission) {
		t.Errorf("the reworded error %v is no longer ErrPermission", got)
	}
	if a := c.forCaller(caller{}, err); a != err {
		t.Errorf("the admin is told %q, want the paths", a)
	}
	if e := c.forCaller(acme, errNoJob("x")); !errors.Is(e, ErrNoJob) || e.Error() != `no job "x"` {
		t.Errorf("no job reworded to %v", e)
	}
	// A data directory given relative to the working directory shows
	// in both forms.
	wd, _ := os.Getwd()
	rel, _ := filepath.Rel(wd, data)
	c.cfg.DataDir = rel
	if got := c.forCaller(acme, err).Error(); strings.Contains(got, data) || strings.Contains(got, rel) {
		t.Errorf("with --data %s acme is told %q", rel, got)
	}
	c.cfg.DataDir = "data"
	in := errors.New("the metadata of data/tenants/acme/x and data/jobs/y, in data")
	if got, want := c.forCaller(acme, in).Error(), "the metadata of <acme's area>/x and <server data>/jobs/y, in <server data>"; got != want {
		t.Errorf("with --data data acme is told %q, want %q", got, want)
	}
}

// TestTenantStatusNamesNoServerPath: a job's failures, as its tenant reads
// them over the REST API, name no path of the server's data directory;
// the admin reads them whole.
func TestTenantStatusNamesNoServerPath(t *testing.T) {
	cc := startClockedCoordinator(t)
	c := cc.c
	j := addJob(t, c, "a-1", "acme", statusPlan)
	ckpts := CheckpointRoot(c.cfg.DataDir, "a-1")
	c.mu.Lock()
	j.restartLog = []RestartEntry{{Attempt: 1, Reason: "checkpoint 3: open " + ckpts + "/3: no space left on device", Time: c.now()}}
	j.result = &transport.JobResult{JobID: "a-1", State: transport.JobFailed, Error: "writing " + ckpts + ": read-only file system"}
	j.restored = RestoredCheckpoint{ID: 3, Kind: "checkpoint", Location: ckpts, Attempt: 1}
	c.mu.Unlock()
	acme := Caller{Tenant: "acme"}
	d, err := c.Job(acme, "a-1")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := c.Exceptions(acme, "a-1")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := c.Checkpoints(acme, "a-1")
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{d.RestartLog[0].Reason, d.Result.Error, ex.Root.Message, cp.Latest.Restored.Location}
	for _, e := range ex.Entries {
		texts = append(texts, e.Message)
	}
	for _, s := range texts {
		if strings.Contains(s, c.cfg.DataDir) || !strings.Contains(s, "<server data>/jobs/a-1/checkpoints") {
			t.Errorf("acme reads %q", s)
		}
	}
	if d, err := c.Job(Caller{}, "a-1"); err != nil || !strings.Contains(d.Result.Error, ckpts) || !strings.Contains(d.RestartLog[0].Reason, ckpts) {
		t.Errorf("the admin reads %+v, %v", d, err)
	}
}
