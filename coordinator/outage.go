package coordinator

import (
	"fmt"
	"time"

	"github.com/wstream/wstream/internal/logging"
)

// Lost checkpoint messages. Triggers, notifications and acknowledgements are
// plain NATS messages: while a connection is down, those sent to or by the
// disconnected side may be lost, and the checkpoints waiting for them would
// only end at their timeout (10 minutes by default). Each side notices its
// own reconnection (a worker's heartbeat counts its reconnects, and goes out
// at once after one), and the coordinator then aborts the pending
// checkpoints concerned; the next periodic trigger follows as usual.

// Both run under c.mu (a heartbeat, a reconnection) and hand the abort to
// each checkpoint driver's loop without waiting for it to run: a loop may
// be busy for seconds in its synchronous I/O (discarding a checkpoint from
// an object store whose NATS node just died), and a heartbeat that held
// c.mu meanwhile kept every other heartbeat out, until the liveness
// monitor declared the workers lost and the job restarted.

// workerReconnected aborts the pending checkpoints of the jobs with subtasks
// on worker, whose NATS connection was down. c.mu is held.
func (c *Coordinator) workerReconnectedLocked(worker string) {
	for _, j := range c.jobs {
		if j.ckpt == nil || j.done {
			continue
		}
		for _, w := range j.placement.workers() {
			if w == worker {
				go j.ckpt.abortPending(fmt.Sprintf("worker %s reconnected to NATS: checkpoint messages may have been lost", worker))
				break
			}
		}
	}
}

// connectionRestoredLocked aborts the pending checkpoints of every job after
// the coordinator's own NATS connection was down. c.mu is held.
func (c *Coordinator) connectionRestoredLocked() {
	for _, j := range c.jobs {
		if j.ckpt != nil && !j.done {
			go j.ckpt.abortPending("the coordinator reconnected to NATS: checkpoint messages may have been lost")
		}
	}
}

// abortPending aborts the driver's pending checkpoints for reason.
func (d *ckptDriver) abortPending(reason string) {
	d.do(func() {
		if d.stopped || len(d.sm.Pending()) == 0 {
			return
		}
		d.c.cfg.Log.Warn("aborting checkpoints: "+reason, logging.Job, d.j.info.JobID, "checkpoints", fmt.Sprint(d.sm.Pending()))
		d.sm.AbortPending(time.Now().UnixMilli(), reason)
		d.run()
	})
}
