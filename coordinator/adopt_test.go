package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/transport"
)

// TestAdoptPlacement checks what a new leader makes of its workers'
// heartbeats: it adopts an attempt only when the live workers run every
// subtask of the attempt its spec names, once, with the spec's module, and
// have heard its epoch; otherwise it says why not.
func TestAdoptPlacement(t *testing.T) {
	refs := []transport.TaskRef{{Chain: 0, Subtask: 0}, {Chain: 0, Subtask: 1}, {Chain: 1, Subtask: 0}, {Chain: 1, Subtask: 1}}
	spec := &JobSpec{JobID: "j", Attempt: 2, ModuleDigest: "m"}
	const epoch = 40
	run := func(tasks ...transport.TaskRef) transport.RunningAttempt {
		return transport.RunningAttempt{JobID: "j", Attempt: 2, Module: "m", Epoch: 30, Tasks: tasks}
	}
	both := func(a, b transport.RunningAttempt) map[string]transport.WorkerInfo {
		return map[string]transport.WorkerInfo{
			"w1": {ID: "w1", Epoch: epoch, Running: []transport.RunningAttempt{a}},
			"w2": {ID: "w2", Epoch: epoch, Running: []transport.RunningAttempt{b}},
		}
	}
	cases := []struct {
		name    string
		workers map[string]transport.WorkerInfo
		why     string // "" : adopted
	}{
		{"every subtask on two workers", both(run(refs[0], refs[2]), run(refs[1], refs[3])), ""},
		{"a subtask missing", both(run(refs[0], refs[2]), run(refs[1])), "no live worker runs subtask(s) 1/1"},
		{"a subtask twice", both(run(refs[0], refs[1], refs[2]), run(refs[1], refs[3])), "subtask 0/1 runs on workers"},
		{"another attempt", both(run(refs[0], refs[2]), transport.RunningAttempt{JobID: "j", Attempt: 3, Module: "m", Tasks: refs[1:2]}), "runs attempt 3"},
		{"another module", both(run(refs[0], refs[2]), transport.RunningAttempt{JobID: "j", Attempt: 2, Module: "n", Tasks: []transport.TaskRef{refs[1], refs[3]}}), "runs module n"},
		{"deployed by a later leader", both(run(refs[0], refs[2]), transport.RunningAttempt{JobID: "j", Attempt: 2, Module: "m", Epoch: 41, Tasks: []transport.TaskRef{refs[1], refs[3]}}), "deployed at epoch 41"},
		{"epoch not heard", map[string]transport.WorkerInfo{
			"w1": {ID: "w1", Epoch: epoch, Running: []transport.RunningAttempt{run(refs[0], refs[2])}},
			"w2": {ID: "w2", Epoch: 30, Running: []transport.RunningAttempt{run(refs[1], refs[3])}},
		}, "has not heard this leader's epoch 40"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			c := &Coordinator{cfg: Config{WorkerTimeout: time.Minute}, now: func() time.Time { return now }, workers: map[string]*workerState{}}
			for id, info := range tc.workers {
				c.workers[id] = &workerState{info: info, lastSeen: now}
			}
			// A lost worker's heartbeat counts for nothing.
			c.workers["gone"] = &workerState{info: transport.WorkerInfo{ID: "gone", Epoch: epoch,
				Running: []transport.RunningAttempt{run(refs...)}}, lastSeen: now.Add(-time.Hour)}
			j := &jobState{info: transport.JobInfo{JobID: "j"}, refs: refs}
			pl, why := c.adoptPlacementLocked(j, spec, epoch)
			if tc.why == "" {
				if pl == nil || why != "" {
					t.Fatalf("not adopted: %s", why)
				}
				if n := len(pl["w1"]) + len(pl["w2"]); n != len(refs) || len(pl) != 2 {
					t.Fatalf("placement %v, want the heartbeats' four subtasks on w1 and w2", pl)
				}
				return
			}
			if pl != nil || !strings.Contains(why, tc.why) {
				t.Fatalf("placement %v, reason %q; want none, because %q", pl, why, tc.why)
			}
		})
	}
}
