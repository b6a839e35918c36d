package coordinator

import (
	"sort"
	"sync"
	"time"

	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// The readers' view. `wstream list`, `wstream workers`, the REST API's
// overview, jobs, a job's detail, vertices and checkpoint overview,
// workers, and the metrics endpoint read an immutable copy of the
// coordinator's jobs and workers (view), never c.mu: whoever
// releases c.mu publishes it first (stateMu), so a reader that comes after
// a change sees it, and a slow reader stalls nothing.

// stateMu is the coordinator's lock; Unlock publishes the readers' view of
// what it guards before it releases it.
type stateMu struct {
	sync.Mutex
	publish func()
}

// Unlock publishes the view and releases the lock.
func (m *stateMu) Unlock() {
	if m.publish != nil {
		m.publish()
	}
	m.Mutex.Unlock()
}

// view is the coordinator's jobs and workers as of the latest release of
// c.mu. Nothing in it changes once published.
type view struct {
	jobs    []jobView // oldest first
	workers []workerView
	// startedAt is when the coordinator started (or took over).
	startedAt time.Time
}

// jobView is a job as its readers see it.
type jobView struct {
	// row is the job's row in `wstream list` (the lifecycle's state,
	// attempt, restarts and cause, in the admin's words).
	row   transport.JobInfo
	state lifecycle.State
	// placed lists the subtasks of its current attempt by worker (none
	// once the job has ended).
	placed map[string][]PlacedSubtask
	jobDetailView
}

// jobDetailView is what the detail readers (Job, Vertex, Checkpoints)
// read: values, and pointers to what is replaced rather than changed in
// place (the plan, the restart log, the result) or has a lock of its own
// (the checkpoint statistics; the checkpoint driver, asked on its loop).
type jobDetailView struct {
	plan           *job.Plan
	module, digest string
	restartLog     []RestartEntry
	result         *transport.JobResult
	started        time.Time
	attempt        int
	restored       RestoredCheckpoint
	ckpt           *ckptDriver
	stats          *ckptStats
}

// workerView is a registered worker; whether it is live is judged when it
// is read.
type workerView struct {
	info     transport.WorkerInfo
	lastSeen time.Time
	used     int
}

// publishLocked makes the jobs and workers as they stand the readers'
// view; c.mu is held.
func (c *Coordinator) publishLocked() {
	v := &view{jobs: make([]jobView, 0, len(c.jobs)), workers: make([]workerView, 0, len(c.workers)), startedAt: c.startedAt}
	for _, j := range c.jobs {
		jv := jobView{row: c.jobRowLocked(j), state: j.lc.State(), jobDetailView: jobDetailView{
			plan: j.plan, module: j.module, digest: j.digest, restartLog: j.restartLog, result: j.result,
			started: j.started, attempt: j.attempt, restored: j.restored, ckpt: j.ckpt, stats: &j.stats}}
		if !j.done && len(j.placement) > 0 {
			chains := j.chainNames()
			jv.placed = make(map[string][]PlacedSubtask, len(j.placement))
			for w, refs := range j.placement {
				subs := make([]PlacedSubtask, len(refs))
				for i, r := range refs {
					subs[i] = PlacedSubtask{JobID: j.info.JobID, Attempt: j.attempt, Chain: nameOf(chains, r.Chain), Subtask: r.Subtask}
				}
				jv.placed[w] = subs
			}
		}
		v.jobs = append(v.jobs, jv)
	}
	sort.Slice(v.jobs, func(i, k int) bool { return v.jobs[i].row.Started.Before(v.jobs[k].row.Started) })
	for _, w := range c.workers {
		v.workers = append(v.workers, workerView{info: w.info, lastSeen: w.lastSeen, used: w.used})
	}
	sort.Slice(v.workers, func(i, k int) bool { return v.workers[i].info.ID < v.workers[k].info.ID })
	c.view.Store(v)
}

// readView returns the readers' view.
func (c *Coordinator) readView() *view {
	if v := c.view.Load(); v != nil {
		return v
	}
	return &view{}
}

// live reports whether the worker was heard from within the worker
// timeout.
func (c *Coordinator) live(w workerView) bool { return c.now().Sub(w.lastSeen) <= c.cfg.WorkerTimeout }

func (c *Coordinator) workerRow(w workerView) transport.WorkerRow {
	return transport.WorkerRow{ID: w.info.ID, Slots: w.info.Slots, Used: w.used, LastSeen: w.lastSeen, Live: c.live(w)}
}

// viewedJob returns job id from the readers' view, when who may see it.
func (c *Coordinator) viewedJob(who Caller, id string) (*jobView, error) {
	v := c.readView()
	for i := range v.jobs {
		if jv := &v.jobs[i]; jv.row.JobID == id && jv.visible(who.internal()) {
			return jv, nil
		}
	}
	// Another tenant's job is as absent as one that never was.
	return nil, errNoJob(id)
}

// visible reports whether who may see the job.
func (jv *jobView) visible(who caller) bool { return who.admin() || jv.row.Tenant == who.tenant }
