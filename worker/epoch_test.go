package worker

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/transport"
)

// TestAdmitEpochs: a worker obeys commands of the highest epoch it has seen
// or a higher one, refuses lower ones, and never lowers its epoch.
func TestAdmitEpochs(t *testing.T) {
	w := &Worker{log: slog.New(slog.DiscardHandler)}
	for i, c := range []struct {
		epoch uint64
		want  bool
		after uint64
	}{
		{0, true, 0}, {5, true, 5}, {5, true, 5}, {4, false, 5}, {0, false, 5}, {9, true, 9}, {6, false, 9}, {10, true, 10},
	} {
		if got := w.admit(c.epoch, "test"); got != c.want || w.epoch.Load() != c.after {
			t.Fatalf("step %d: admit(%d) = %v with epoch %d after, want %v and %d", i, c.epoch, got, w.epoch.Load(), c.want, c.after)
		}
	}
}

// TestHeartbeatForAdoption: a heartbeat lists, for each attempt, the
// subtasks whose input has not ended, the module's digest and the
// deployment's epoch, and the highest epoch the worker has heard: what a
// new leader needs to adopt the attempt.
func TestHeartbeatForAdoption(t *testing.T) {
	url, _ := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w := &Worker{log: slog.New(slog.DiscardHandler), cfg: Config{ID: "w1", NATS: nc}, jobs: map[string]*jobRun{}}
	ended := &task{id: checkpoint.TaskID{Chain: 1, Subtask: 0}}
	ended.inputEnded.Store(true)
	w.jobs["j"] = &jobRun{id: "j", attempt: 3, digest: "sha", epoch: 7,
		tasks: []*task{{id: checkpoint.TaskID{Chain: 0, Subtask: 1}}, ended, {id: checkpoint.TaskID{Chain: 2, Subtask: 1}}}}
	w.admit(9, "test")
	var info transport.WorkerInfo
	if err := json.Unmarshal(w.beat(), &info); err != nil {
		t.Fatal(err)
	}
	want := transport.RunningAttempt{JobID: "j", Attempt: 3, Module: "sha", Epoch: 7,
		Tasks: []transport.TaskRef{{Chain: 0, Subtask: 1}, {Chain: 2, Subtask: 1}}}
	if info.Epoch != 9 || len(info.Running) != 1 || !reflect.DeepEqual(info.Running[0], want) {
		t.Fatalf("heartbeat %+v, want epoch 9 and running %+v", info, want)
	}
}
