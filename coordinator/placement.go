package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/transport"
)

// placement maps worker ids to the subtasks they run.
type placement map[string][]transport.TaskRef

// workers lists the placement's workers in order.
func (p placement) workers() []string {
	out := make([]string, 0, len(p))
	for w := range p {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// place reserves slots for a job's subtasks on the live workers. Subtask s
// of every chain goes to the s-th live worker (in id order, round robin), or
// the next one with a free slot: forward edges stay on one worker and keyed
// exchanges spread over all of them. With one live worker every subtask runs
// there, as long as it has the slots.
func (c *Coordinator) place(name string, refs []transport.TaskRef) (placement, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.placeLocked(name, refs)
}

func (c *Coordinator) placeLocked(name string, refs []transport.TaskRef) (placement, error) {
	var live []*workerState
	for _, w := range c.workers {
		if c.now().Sub(w.lastSeen) <= c.cfg.WorkerTimeout {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		if len(c.workers) == 0 {
			return nil, errors.New("no worker is registered: start one with `wstream worker`")
		}
		return nil, fmt.Errorf("job %s needs %d slots and no live worker has that many free", name, len(refs))
	}
	sort.Slice(live, func(i, k int) bool { return live[i].info.ID < live[k].info.ID })
	free := make([]int, len(live))
	total, unlimited := 0, false
	for i, w := range live {
		if w.info.Slots <= 0 {
			free[i] = -1
			unlimited = true
			continue
		}
		free[i] = max(0, w.info.Slots-w.used)
		total += free[i]
	}
	if !unlimited && total < len(refs) {
		if len(live) == 1 {
			return nil, fmt.Errorf("job %s needs %d slots and no live worker has that many free", name, len(refs))
		}
		return nil, fmt.Errorf("job %s needs %d slots and the %d live workers have %d free", name, len(refs), len(live), total)
	}
	p := placement{}
	for _, r := range refs {
		for k := 0; k < len(live); k++ {
			i := (r.Subtask + k) % len(live)
			if free[i] == 0 {
				continue
			}
			if free[i] > 0 {
				free[i]--
			}
			p[live[i].info.ID] = append(p[live[i].info.ID], r)
			break
		}
	}
	for _, w := range live {
		w.used += len(p[w.info.ID])
	}
	return p, nil
}

// release gives back the slots of a placement.
func (c *Coordinator) release(p placement) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(p)
}

func (c *Coordinator) releaseLocked(p placement) {
	for id, refs := range p {
		if w, ok := c.workers[id]; ok {
			w.used -= len(refs)
		}
	}
}

// dataStream creates a job's data stream, unless it exists, when its
// placement spans several workers, and returns its name ("" for a job on
// one worker). The stream is not reset between attempts.
func (c *Coordinator) dataStream(j *jobState, p placement) (string, error) {
	id := j.info.JobID
	if len(p) < 2 {
		// An earlier attempt's stream is kept: the checkpoint this one
		// restores from may refer to ranges of it. It goes with the job.
		return "", nil
	}
	nc, err := c.jobConn(j)
	if err != nil {
		return "", err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// Right after a NATS server restart JetStream may not answer yet.
		err := transport.CreateDataStream(ctx, js, id, c.replicas())
		if err == nil {
			return transport.DataStream(id), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("job %s: %w", id, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// dropDataStream removes a job's data stream, if it has one.
func (c *Coordinator) dropDataStream(j *jobState) {
	id := j.info.JobID
	nc, err := c.jobConn(j)
	var js jetstream.JetStream
	if err == nil {
		js, err = jetstream.New(nc)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = transport.DeleteDataStream(ctx, js, id)
		cancel()
	}
	if err != nil {
		c.cfg.Log.Warn("dropping the job's data stream", logging.Job, id, "err", err)
	}
}

// deployOn sends a worker its part of an attempt and waits for its answer.
func (c *Coordinator) deployOn(worker string, d transport.Deployment) error {
	epoch, err := c.fence()
	if err != nil {
		return err
	}
	d.Epoch = epoch
	b, _ := json.Marshal(d)
	// A worker that has not re-established its connection yet (after a
	// NATS server restart) has no subscription: give it a few seconds.
	retryUntil := time.Now().Add(5 * time.Second)
	var msg *nats.Msg
	for {
		msg, err = c.cfg.NATS.Request(transport.WorkerDeploySubject(worker), b, c.cfg.DeployTimeout)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(retryUntil) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	var r transport.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return err
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}
