package tests

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUpgradeEndsWhenLeaderDies: `wstream upgrade --nats` waits for the
// coordinator that leads when it starts; when that coordinator is killed
// mid-upgrade (no standby takes over), the command ends non-zero once the
// lease goes unrenewed past its period, naming the coordinator, instead of
// waiting for its --timeout. The worker is paused so that the upgrade's
// savepoint cannot complete before the kill.
func TestUpgradeEndsWhenLeaderDies(t *testing.T) {
	r := startLeaderRun(t)
	r.checkpointed(t, r.leader, 0, edgeWait)
	if err := r.worker.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.worker.cmd.Process.Signal(syscall.SIGCONT) })
	up := startEdge(t, r.dir, "upgrade", "--nats", r.url, "--plan", "plan.json", r.job, module(t, "testops"))
	r.leader.until(t, "the upgrade's start", false, func() bool {
		return strings.Contains(r.leader.stderr.String(), "upgrading at a savepoint")
	})
	killed := time.Now()
	r.leader.kill(t)
	code := up.wait(t, edgeWait)
	out := up.stderr.String()
	t.Logf("the upgrade ended %s after the leader's kill (lease %s): exit %d", time.Since(killed).Round(time.Millisecond), leaderLease, code)
	if code == 0 || !strings.Contains(out, "which started it, has not renewed its lease") {
		t.Fatalf("the upgrade did not end on the leader's death (exit %d):\n%s", code, out)
	}
}
