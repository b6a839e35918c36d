package coordinator

import (
	"testing"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/transport"
)

// TestReconnectDoesNotWaitForBusyDriver: a worker's reconnection, heard in
// a heartbeat under c.mu, aborts the job's pending checkpoints without
// waiting while the checkpoint driver's loop is busy in its I/O (regression:
// a discard stalled 5–30 s on a killed NATS node held c.mu as long, and
// the liveness monitor then declared live workers lost).
func TestReconnectDoesNotWaitForBusyDriver(t *testing.T) {
	tasks := []checkpoint.TaskID{{Chain: 0, Subtask: 0}}
	sm, err := checkpoint.NewCoordinator(checkpoint.Config{Interval: 1000, Timeout: 60000, MaxConcurrent: 1}, tasks, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &ckptDriver{sm: sm, in: make(chan func()), loopDone: make(chan struct{}), pending: map[int64]int64{}, kinds: map[int64]checkpoint.Kind{}}
	go d.loop()
	busy, aborted := make(chan struct{}), make(chan struct{})
	go d.do(func() { <-busy })
	c := &Coordinator{jobs: map[string]*jobState{
		"j": {info: transport.JobInfo{JobID: "j"}, ckpt: d, placement: placement{"w1": {{Chain: 0, Subtask: 0}}}},
	}}
	returned := make(chan struct{})
	go func() {
		c.mu.Lock()
		c.workerReconnectedLocked("w1")
		c.connectionRestoredLocked()
		c.mu.Unlock()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("the reconnection waited for the busy checkpoint driver holding c.mu")
	}
	// The loop goes on once its I/O is over (the aborts find nothing
	// pending).
	close(busy)
	go d.do(func() { close(aborted) })
	select {
	case <-aborted:
	case <-time.After(time.Minute):
		t.Fatal("the loop never ran again")
	}
	d.do(func() { d.stopped = true })
	<-d.loopDone
}
