package lifecycle

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wstream/wstream/job"
)

// TestRandomEvents feeds jobs random event sequences, as an unreliable
// driver and cluster would (stale reports, losses during deployments,
// cancels at any time, heartbeats that lose reports), and checks after
// every event what must always hold:
//
//   - a job in FINISHED, FAILED, CANCELED or SUSPENDED never changes
//     state; a SUSPENDED job asks for nothing, an ended one only cancels
//     attempts workers still list; FAILING only ends FAILED, CANCELLING
//     only CANCELED;
//   - attempts are deployed in increasing order, and never two at once:
//     no attempt holds slots when the next is deployed;
//   - every placed attempt releases its slots exactly once, and a deployed
//     attempt only when every one of its subtasks has ended (reported, on
//     a lost worker, or with its report lost);
//   - no cancel overtakes a deployment;
//   - checkpoints start at most once per attempt, after its deployment,
//     and stop exactly once, after they started;
//   - the result is published exactly once, after the data stream is
//     dropped and the spec persisted, and only for an ended job;
//   - a cancel accepted while the job was not FAILING ends it CANCELED;
//   - restarts never exceed the strategy's attempts.
func TestRandomEvents(t *testing.T) {
	for seed := uint64(0); seed < 3000; seed++ {
		s := newSim(t, seed)
		for i := 0; i < 200 && !s.done(); i++ {
			s.step()
		}
		s.finish()
		if t.Failed() {
			return
		}
	}
}

type sim struct {
	t    *testing.T
	seed uint64
	r    *rand.Rand
	j    *Job
	cfg  Config
	now  int64
	// trace is every event and its actions, for the failure message.
	trace []string

	maxRestarts int
	workers     []string

	lastDeploy  int  // the last attempt deployed (-1: none)
	wantPlace   bool // a Deploy waits for its placement
	deploying   bool // placed, not reported deployed or failed
	deployedAt  map[int]bool
	tasks       map[int]map[string]int // per placed attempt
	reported    map[int]map[string]int // accepted reports
	lost        map[int]map[string]bool
	missing     map[int]map[string]int
	holdsSlots  map[int]bool
	released    map[int]int
	ckptStarted map[int]bool
	ckptStopped map[int]int
	published   int
	cancelled   bool // a cancel was accepted while the job was not FAILING
	schedules   int
	everEnded   bool
}

func newSim(t *testing.T, seed uint64) *sim {
	r := rand.New(rand.NewPCG(seed, 0x1f3))
	s := &sim{t: t, seed: seed, r: r, lastDeploy: -1, deployedAt: map[int]bool{},
		tasks: map[int]map[string]int{}, reported: map[int]map[string]int{}, lost: map[int]map[string]bool{},
		missing: map[int]map[string]int{}, holdsSlots: map[int]bool{}, released: map[int]int{},
		ckptStarted: map[int]bool{}, ckptStopped: map[int]int{}, maxRestarts: -1}
	switch r.IntN(4) {
	case 0:
	case 1:
		n := r.IntN(4)
		s.cfg.Restart = &job.RestartSettings{Strategy: job.RestartFixedDelay, Attempts: n, Delay: int64(r.IntN(50))}
		if n > 0 {
			s.maxRestarts = n
		}
	case 2:
		s.cfg.Restart = &job.RestartSettings{Strategy: job.RestartExponential, Attempts: 5, Delay: 10, MaxDelay: 80}
		s.maxRestarts = 5
	case 3:
		s.cfg.Restart = &job.RestartSettings{Strategy: job.RestartFixedDelay, Delay: 5}
	}
	s.cfg.Checkpoints = r.IntN(2) == 0
	s.cfg.FromSavepoint = r.IntN(4) == 0
	s.cfg.MissedHeartbeats = 1 + r.IntN(3)
	s.workers = []string{"w1", "w2", "w3", "w4"}[:1+r.IntN(4)]
	j, err := New(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.j = j
	if r.IntN(5) == 0 {
		if err := j.Recover(r.IntN(3), 0, nil); err != nil {
			t.Fatal(err)
		}
		s.event("resume", func() error { return j.Resume(s.now) })
	} else {
		s.event("submit", func() error { return j.Submit(s.now) })
	}
	return s
}

func (s *sim) done() bool { return s.j.State().Terminal() && s.r.IntN(10) == 0 }

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d: %s\n%s", s.seed, fmt.Sprintf(format, args...), strings.Join(s.trace, "\n"))
}

// attemptArg is the current attempt, sometimes a neighbour (stale).
func (s *sim) attemptArg() int {
	n := s.j.Attempt()
	switch s.r.IntN(10) {
	case 0:
		return n - 1
	case 1:
		return n + 1
	}
	return n
}

func (s *sim) worker() string { return s.workers[s.r.IntN(len(s.workers))] }

func (s *sim) step() {
	s.now += int64(s.r.IntN(30))
	j := s.j
	switch k := s.r.IntN(100); {
	case k < 12 && s.wantPlace:
		n := j.Attempt()
		tasks := map[string]int{}
		for _, w := range s.workers {
			if s.r.IntN(3) > 0 {
				tasks[w] = 1 + s.r.IntN(3)
			}
		}
		if len(tasks) == 0 {
			tasks[s.workers[0]] = 1
		}
		var err error
		s.event(fmt.Sprintf("placed %d %v", n, tasks), func() error { err = j.Placed(s.now, n, tasks); return err })
		s.wantPlace = false
		if err == nil {
			for m, held := range s.holdsSlots {
				if held {
					s.fatalf("attempt %d placed while attempt %d holds slots", n, m)
				}
			}
			s.deploying = true
			s.tasks[n] = tasks
			s.reported[n] = map[string]int{}
			s.lost[n] = map[string]bool{}
			s.missing[n] = map[string]int{}
			s.holdsSlots[n] = true
		}
	case k < 15 && s.wantPlace:
		n := j.Attempt()
		s.wantPlace = false
		s.event(fmt.Sprintf("deploy-failed %d (no placement)", n), func() error { return j.DeployFailed(s.now, n, "no placement", nil) })
	case k < 27 && s.deploying:
		n := j.Attempt()
		s.deploying = false
		if s.r.IntN(8) == 0 {
			var took []string
			for w := range s.tasks[n] {
				if s.r.IntN(2) == 0 {
					took = append(took, w)
				}
			}
			s.event(fmt.Sprintf("deploy-failed %d took %v", n, took), func() error { return j.DeployFailed(s.now, n, "refused", took) })
			return
		}
		s.deployedAt[n] = true // before: the event checks the actions against it
		var err error
		s.event(fmt.Sprintf("deployed %d", n), func() error { err = j.Deployed(s.now, n); return err })
		if err != nil {
			delete(s.deployedAt, n)
		}
	case k < 55:
		n, w := s.attemptArg(), s.worker()
		end := TaskEnd(1 + s.r.IntN(3))
		if s.reported[n] == nil {
			s.reported[n] = map[string]int{}
		}
		s.reported[n][w]++ // before: the event checks the actions against it
		var err error
		s.event(fmt.Sprintf("task %d %s %s", n, w, end), func() error { err = j.TaskEnded(s.now, n, w, end, "boom"); return err })
		if err != nil {
			s.reported[n][w]--
		}
	case k < 60:
		w := s.worker()
		n := j.Attempt()
		a := j.a
		accepted := !j.State().Terminal() && (a.phase == placed || a.phase == deployed) && a.tasks[w] > 0 && a.lost[w] == ""
		if accepted {
			s.lost[n][w] = true
		}
		s.event("lost "+w, func() error { j.WorkerLost(s.now, w, w+" lost"); return nil })
	case k < 72:
		w := s.worker()
		var listed []int
		n := j.Attempt()
		for m := n - 2; m <= n; m++ {
			if m >= 0 && s.r.IntN(2) == 0 {
				listed = append(listed, m)
			}
		}
		// The rule the job applies to lost reports, mirrored.
		a := j.a
		if !j.State().Terminal() && a.phase == deployed && a.tasks[w] > 0 && a.lost[w] == "" {
			owed := s.tasks[n][w] - s.reported[n][w]
			if owed <= 0 || slices.Contains(listed, n) {
				delete(s.missing[n], w)
			} else if s.missing[n][w]++; s.missing[n][w] >= s.cfg.MissedHeartbeats {
				delete(s.missing[n], w)
				s.reported[n][w] += owed
			}
		}
		s.event(fmt.Sprintf("heartbeat %s %v", w, listed), func() error { j.Heartbeat(s.now, w, listed); return nil })
	case k < 77:
		pre := j.State()
		var err error
		s.event("cancel", func() error { err = j.Cancel(s.now); return err })
		if err == nil && pre != Failing {
			s.cancelled = true
		}
	case k < 81:
		n := s.attemptArg()
		s.event(fmt.Sprintf("fail %d", n), func() error { return j.Fail(s.now, n, "checkpoints") })
	case k < 84:
		s.event("stop-requested", func() error { return j.StopRequested(s.now) })
	case k < 88:
		n := s.attemptArg()
		s.event(fmt.Sprintf("stop-completed %d", n), func() error { return j.StopCompleted(s.now, n, 7) })
	case k < 90:
		n := s.attemptArg()
		s.event(fmt.Sprintf("stop-failed %d", n), func() error { return j.StopFailed(s.now, n, 7, "declined") })
	case k < 91:
		s.event("suspend", func() error { j.Suspend(s.now); return nil })
	default:
		s.now += int64(s.r.IntN(100))
		s.event("tick", func() error { j.Tick(s.now); return nil })
	}
}

// event feeds one event and checks the actions and the state it leads to.
func (s *sim) event(what string, feed func() error) {
	j := s.j
	pre := j.State()
	preAttempt := j.Attempt()
	err := feed()
	acts := j.Ready()
	line := fmt.Sprintf("@%d %s: %s → %s", s.now, what, pre, j.State())
	if err != nil {
		line += " (" + err.Error() + ")"
	}
	for _, a := range acts {
		line += "\n\t" + a.String()
	}
	s.trace = append(s.trace, line)

	post := j.State()
	switch {
	case pre.Terminal() && post != pre:
		s.fatalf("%s left %s", post, pre)
	case pre == Failing && post != Failing && post != Failed && post != Suspended:
		s.fatalf("FAILING went to %s", post)
	case pre == Cancelling && post != Cancelling && post != Canceled && post != Suspended:
		s.fatalf("CANCELLING went to %s", post)
	case j.Attempt() < preAttempt:
		s.fatalf("attempt went back from %d to %d", preAttempt, j.Attempt())
	case s.maxRestarts >= 0 && j.Restarts() > s.maxRestarts:
		s.fatalf("%d restarts, the strategy allows %d", j.Restarts(), s.maxRestarts)
	}
	if pre == Suspended && len(acts) > 0 {
		s.fatalf("a SUSPENDED job asked for %v", acts)
	}
	var sawDrop, sawPersist bool
	for _, a := range acts {
		if pre.Ended() {
			if _, ok := a.(CancelAttempt); !ok {
				s.fatalf("an ended job asked for %s", a)
			}
		}
		switch a := a.(type) {
		case Deploy:
			if a.Attempt <= s.lastDeploy || a.Attempt != j.Attempt() {
				s.fatalf("deploy of attempt %d after %d (current %d)", a.Attempt, s.lastDeploy, j.Attempt())
			}
			for m, held := range s.holdsSlots {
				if held {
					s.fatalf("attempt %d deployed while attempt %d holds slots", a.Attempt, m)
				}
			}
			s.lastDeploy = a.Attempt
			s.wantPlace = true
			s.deploying = false
		case ReleaseSlots:
			n := a.Attempt
			if !s.holdsSlots[n] {
				s.fatalf("release of attempt %d, which holds no slots", n)
			}
			s.holdsSlots[n] = false
			s.released[n]++
			if s.deployedAt[n] {
				for w, k := range s.tasks[n] {
					if !s.lost[n][w] && s.reported[n][w] < k {
						s.fatalf("attempt %d released with %d of its %d subtasks on %s running", n, k-s.reported[n][w], k, w)
					}
				}
			}
		case CancelAttempt:
			if a.Attempt == j.Attempt() && j.a.phase == placed {
				s.fatalf("cancel of attempt %d while it is being deployed", a.Attempt)
			}
		case StartCheckpoints:
			if !s.cfg.Checkpoints || !s.deployedAt[a.Attempt] || s.ckptStarted[a.Attempt] || s.ckptStopped[a.Attempt] > 0 {
				s.fatalf("checkpoints of attempt %d started out of turn", a.Attempt)
			}
			s.ckptStarted[a.Attempt] = true
		case StopCheckpoints:
			if !s.cfg.Checkpoints || s.tasks[a.Attempt] == nil {
				s.fatalf("checkpoints of attempt %d stopped, which has none", a.Attempt)
			}
			s.ckptStopped[a.Attempt]++
			if s.ckptStopped[a.Attempt] > 1 {
				s.fatalf("checkpoints of attempt %d stopped twice", a.Attempt)
			}
		case ScheduleRestart:
			s.schedules++
			if post != Restarting {
				s.fatalf("restart scheduled by a %s job", post)
			}
		case DropDataStream:
			sawDrop = true
		case PersistSpec:
			sawPersist = true
		case PublishResult:
			s.published++
			if !sawDrop || !sawPersist || !post.Ended() || a.Result.State != post || s.published > 1 {
				s.fatalf("result %s published out of turn (%d times)", a.Result, s.published)
			}
		}
	}
	if s.schedules != j.Restarts() {
		s.fatalf("%d restarts scheduled, %d counted", s.schedules, j.Restarts())
	}
	if post.Ended() {
		s.everEnded = true
		if s.cancelled && post != Canceled {
			s.fatalf("cancelled, and ended %s", post)
		}
	}
	// The attempt's own books.
	a := j.a
	sum := 0
	for w, k := range a.reported {
		if k > a.tasks[w] {
			s.fatalf("worker %s reported %d of %d subtasks", w, k, a.tasks[w])
		}
		sum += k
	}
	if sum != a.ended || a.ended > a.total || a.finished > a.ended {
		s.fatalf("books: %d reported, %d ended, %d finished of %d", sum, a.ended, a.finished, a.total)
	}
}

// finish checks what must hold at the end of a run.
func (s *sim) finish() {
	j := s.j
	if j.State().Ended() != (s.published == 1) {
		s.fatalf("%s with %d results published", j.State(), s.published)
	}
	if !j.State().Ended() {
		return
	}
	for n := range s.tasks {
		if s.released[n] != 1 {
			s.fatalf("attempt %d released %d times", n, s.released[n])
		}
		if s.cfg.Checkpoints && s.ckptStopped[n] != 1 {
			s.fatalf("checkpoints of attempt %d stopped %d times", n, s.ckptStopped[n])
		}
	}
}
