package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
	"github.com/wstream/wstream/subtask"
	"github.com/wstream/wstream/transport"
)

// Output buffers are flushed to their channel when they reach this size, and
// after every input message, so channels carry batches of tens of KiB.
const flushBytes = 32 << 10

// A subtask writes its unflushed state changes to Pebble when they fill its
// hot-key cache (dirty entries cannot be evicted, so the cache would grow
// past its size) or hold stateFlushBytes of values. A tenant's store
// flushes sooner by itself, at half the tenant's memory quota
// (state.Options.MemoryBytes).
const stateFlushBytes = 32 << 20

// sourceBatch is how many records a source is asked for at a time.
const sourceBatch = 1024

// maxKeptOutput bounds the capacity of an output buffer kept for reuse
// after a call: a guest may emit up to its output quota in one call
// (host.Limits.MaxOutputBytesPerCall), and a buffer grown to that must not
// stay with the subtask for the rest of the job.
const maxKeptOutput = 4 << 20

// due is a channel that is always ready: InputGate.Next returns its timer
// error at once when no input or control message is waiting.
var due = func() chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// keyedState is what a stage needs from package state (or noKeyedState):
// the operator's keyed state and timers, and firing them.
type keyedState interface {
	operator.KeyedState
	operator.StateManyGetter
	operator.StateRefPutter
	PopTimers(domain int32, upTo int64, b *abi.Builder) (int, error)
	NextTimer(domain int32) (int64, bool)
}

// stage is one operator vertex of a chain.
type stage struct {
	vertex *job.Vertex
	op     operator.Operator
	state  keyedState
	coll   stageCollector
	// guest: op is a slot of the subtask's instance (or a FairOperator
	// around one), opened with spec and svc.
	guest bool
	spec  operator.Spec
	svc   operator.Services
	// Counters are read by Worker.Metrics and Worker.SubtaskMetrics while
	// the task runs: records and their encoded bytes, and dead letters.
	in       atomic.Int64
	out      atomic.Int64
	inBytes  atomic.Int64
	outBytes atomic.Int64
	dead     atomic.Int64
	// keyed: the stage holds the subtask's keyed state.
	keyed bool
	// calls counts a guest operator's calls (nil for built-in operators).
	calls *host.CallStats
}

// task runs one subtask: a chain of vertices fed by a source or an input gate.
type task struct {
	jobID   string
	attempt int
	id      checkpoint.TaskID
	// inputEnded is set once the subtask's input has ended (or it
	// stopped): a coordinator that did not hear of that end cannot adopt
	// its attempt, so heartbeats leave such a subtask out.
	inputEnded atomic.Bool
	chain      *job.Chain
	subtask    int
	label      string

	// Checkpointing (nil ckpt: the job does not checkpoint).
	ckpt *ckptEnv
	mbox *mailbox
	// machine is the subtask's behaviour; the task drives it (drive.go).
	machine *subtask.Machine
	// input is the data batch the machine is told of, for its Deliver.
	input     []byte
	inputs    []inputRef // gate index → channel
	triggerTS map[int64]int64
	snap      *snapshotInProgress
	// snapStart is when the snapshot in progress started (moved on by the
	// time its barrier took to go out), and syncErr why its synchronous
	// phase failed.
	snapStart time.Time
	syncErr   error
	// prio wakes a send blocked by backpressure for a checkpoint trigger or
	// an overtaking barrier (nil without unaligned checkpoints).
	prio chan struct{}
	// pending is the message a blocked send is trying to enqueue.
	pending      *pendingSend
	snapshotting bool
	handling     bool
	// ended: the input ended and the output is flushed; the subtask waits
	// for its final checkpoint (the machine knows which).
	ended bool
	// opsClosed: the chain's operators are closed (the input ended).
	opsClosed bool
	// replayRest is the restored input channel state not replayed yet, and
	// resendRest the restored output channel state not sent yet.
	replayRest []replayBatch
	resendRest []resendBatch
	// sourceOffset is where a source restored from a savepoint starts.
	sourceOffset []byte
	// digests caches the SHA-256 of the store's SST files (incremental
	// checkpoints); persist goroutines share it.
	digestMu sync.Mutex
	digests  map[string]string
	// localMu serialises the changes to the subtask's local snapshots
	// (local recovery); localAborted holds the aborted checkpoints whose
	// snapshot may still be being persisted.
	localMu      sync.Mutex
	localAborted map[int64]bool
	asyncWG      sync.WaitGroup
	sinkTxn      bool
	restored     *checkpoint.SubtaskState
	// firstRecord, when set, reports the first batch handed to the
	// operators (Deployment.ReportFirstRecord), once.
	firstRecord func()

	source      connector.Source
	srcOut      atomic.Int64
	srcOutBytes atomic.Int64
	gate        *transport.InputGate
	chanWM      []int64
	stages      []*stage
	sink        connector.Sink
	sinkIn      atomic.Int64
	sinkInBytes atomic.Int64
	outs        []*outEdge
	wm          int64
	srcBuf      abi.Builder
	timerBuf    abi.Builder
	store       *state.Store
	closers     []func() error
	now         func() time.Time

	// Live figures for Worker.SubtaskMetrics: the time split, the
	// watermark (t.wm, published), the input channels from other workers,
	// and the keyed state's last measurement (measureState).
	split       timeSplit
	wmPub       atomic.Int64
	remoteIns   []*transport.JetStreamInput
	nextMeasure time.Time
	statsMu     sync.Mutex
	storeStats  state.StoreMetrics
	// turn holds the tenant's slot of the fair-share gate while the
	// subtask works (nil: not a tenant's job).
	turn *fairTurn

	// inst is the instance of the chain's guest stages (nil without one);
	// newInstance makes another when a trap leaves it unusable.
	inst        *host.Instance
	newInstance func() (*host.Instance, error)
	renewals    int // instances replaced after a failure
	resets      int // instances reset to their snapshot after a trap
	// dlIn is the batch of the guarded call in progress (processGuarded),
	// dlErrs the failures of its ranges (the machine's Trap causes),
	// dlCommit the commit points of the range running, and dlCommits
	// whether the guest ever marked one.
	dlIn      batchInput
	dlErrs    []error
	dlCommit  commitPoints
	dlCommits bool
	// spare delivers the instance made ahead for the next renewal (nil:
	// none is being made); spareCloser: dropSpare is among the closers.
	spare       chan spareResult
	spareCloser bool
	// dl is the dead-letter output (nil: guest errors fail the subtask).
	dl *deadLetters
	// curChan is the input channel of the batch being processed (-1: the
	// source, or timers); chanBatches counts each channel's data messages.
	curChan     int
	chanBatches []int64
	// recycle tells, per input channel, whether its batches go back to
	// the pool once processed (batchpool.go); nil: none do.
	recycle []bool
}

// stageServices is the operator.Services of one stage.
type stageServices struct {
	keyedState
	t   *task
	log func(level int32, msg string)
}

func (s *stageServices) Watermark() int64            { return s.t.wm }
func (s *stageServices) ProcessingTime() int64       { return s.t.now().UnixMilli() }
func (s *stageServices) Log(level int32, msg string) { s.log(level, msg) }

// StorageWait is the stage's state's (operator.StorageWaiter); 0 for a
// stage without keyed state.
func (s *stageServices) StorageWait() time.Duration {
	if w, ok := s.keyedState.(operator.StorageWaiter); ok {
		return w.StorageWait()
	}
	return 0
}

// noKeyedState refuses keyed state: the stage's input is not key-partitioned.
type noKeyedState struct{}

func (noKeyedState) RegisterState(string, int32) (int32, error) { return 0, operator.ErrNoKeyedState }
func (noKeyedState) StateGet(int32, []byte, []byte, []byte) ([]byte, error) {
	return nil, operator.ErrNoKeyedState
}
func (noKeyedState) StateGetMany(_ int32, n int, _ func(int) ([]byte, []byte), fn func(int, []byte, operator.StateRef, error) error) error {
	for j := range n {
		if err := fn(j, nil, 0, operator.ErrNoKeyedState); err != nil {
			return err
		}
	}
	return nil
}
func (noKeyedState) StatePut(int32, []byte, []byte, []byte) error { return operator.ErrNoKeyedState }
func (noKeyedState) StatePutRef(int32, []byte, []byte, []byte, operator.StateRef) error {
	return operator.ErrNoKeyedState
}
func (noKeyedState) StateDelete(int32, []byte, []byte) error { return operator.ErrNoKeyedState }
func (noKeyedState) StateIter(int32, []byte, []byte, []byte, func([]byte, []byte) bool) error {
	return operator.ErrNoKeyedState
}
func (noKeyedState) RegisterTimer(int32, []byte, []byte, int64) error {
	return operator.ErrNoKeyedState
}
func (noKeyedState) DeleteTimer(int32, []byte, []byte, int64) error    { return operator.ErrNoKeyedState }
func (noKeyedState) PopTimers(int32, int64, *abi.Builder) (int, error) { return 0, nil }
func (noKeyedState) NextTimer(int32) (int64, bool)                     { return 0, false }

// stageError wraps an operator failure with where it happened, unless the
// error already says so (host.GuestError does).
func (t *task) stageError(s *stage, what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("operator %q (vertex %s, subtask %d) %s: %w", s.vertex.Operator, s.vertex.ID, t.subtask, what, err)
}

// run drives the subtask until its input ends, it fails, or ctx is done.
func (t *task) run(ctx context.Context) error {
	defer t.inputEnded.Store(true)
	now := time.Now()
	t.split.start(now)
	defer t.split.to(timeIdle)
	t.measureState(now)
	t.turn.start()
	defer t.turn.stop()
	if t.source != nil {
		return t.runSource(ctx)
	}
	return t.runGate(ctx)
}

func (t *task) runSource(ctx context.Context) error {
	if err := t.ensureMachine(); err != nil {
		return err
	}
	for {
		// A source that never ends, feeding a chain that never blocks,
		// must still stop when the job is cancelled.
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.mbox != nil {
			if err := t.handleControl(ctx); err != nil {
				return err
			}
			if t.machine.Wait() == subtask.WaitControl {
				// Stopped emitting for a stop-with-savepoint: wait for the
				// stop (or the abort).
				t.split.to(timeIdle)
				t.turn.yield()
				select {
				case <-t.mbox.ready:
				case <-ctx.Done():
					return ctx.Err()
				}
				t.split.to(timeBusy)
				continue
			}
		}
		t.srcBuf.Reset()
		// A source's time counts as busy, except a call that brought no
		// record: it waited for input (an unbounded source that has none).
		t.split.charge(timeBusy)
		// A source may wait for its input: not while holding the slot.
		t.turn.yield()
		wm, done, err := t.source.Next(ctx, &t.srcBuf, sourceBatch)
		if t.srcBuf.Len() == 0 {
			t.split.charge(timeIdle)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("source %q (vertex %s, subtask %d): %w", t.chain.Vertices[0].Connector, t.chain.Vertices[0].ID, t.subtask, err)
		}
		if err := t.turn.hold("the source's output"); err != nil {
			return err
		}
		if n := t.srcBuf.Len(); n > 0 {
			t.srcOut.Add(int64(n))
			t.srcOutBytes.Add(int64(t.srcBuf.Size()))
			if err := t.deliver(ctx, 0, t.srcBuf.Bytes()); err != nil {
				return err
			}
		}
		if done {
			if err := t.machine.EndOfInput(time.Now().UnixMilli(), 0); err != nil {
				return err
			}
			if err := t.runActions(ctx); err != nil {
				return err
			}
			return t.finish(ctx)
		}
		if err := t.advanceWatermark(ctx, wm); err != nil {
			return err
		}
		if err := t.flush(ctx); err != nil {
			return err
		}
	}
}

// runGate runs a subtask with inputs: it takes turns between due
// processing-time timers and the input gate (data, watermarks, barriers,
// ends of input, control messages) until every input has ended.
func (t *task) runGate(ctx context.Context) error {
	if err := t.ensureMachine(); err != nil {
		return err
	}
	t.startGate()
	var wake wakeTimer
	defer wake.stop()
	// fired: due timers fired since the gate was last polled. Due timers
	// and the gate take turns, so timers that a guest keeps due never
	// starve the input, the checkpoint control messages or cancellation,
	// and a busy input never starves the timers.
	fired := false
	for t.machine.Wait() == subtask.WaitInput {
		if err := ctx.Err(); err != nil {
			return err
		}
		var tc <-chan time.Time
		if next, ok := t.nextWake(); ok {
			d := time.Until(time.UnixMilli(next))
			if d <= 0 && !fired {
				if err := t.wakeUp(ctx); err != nil {
					return err
				}
				fired = true
				continue
			}
			tc = wake.arm(d)
		}
		t.split.to(timeIdle)
		t.turn.yield()
		ev, err := t.gate.Next(ctx, tc)
		t.split.to(timeBusy)
		fired = false
		wake.disarm()
		if err != nil {
			return err
		}
		// What the subtask does now, and the output it causes, is its
		// tenant's work.
		if err := t.turn.hold("its input"); err != nil {
			return err
		}
		switch ev.Kind {
		case transport.GateTimer:
			if err := t.wakeUp(ctx); err != nil {
				return err
			}
			fired = true
		case transport.GateInterrupt:
			if err := t.handleControl(ctx); err != nil {
				return err
			}
		case transport.GateMessage:
			if err := t.onMessage(ctx, ev.Ch, ev.Msg); err != nil {
				return err
			}
		}
	}
	return t.finish(ctx)
}

// startGate resets the per-channel records of the input gate's channels.
func (t *task) startGate() {
	t.chanWM = make([]int64, t.gate.Len())
	t.chanBatches = make([]int64, t.gate.Len())
	t.curChan = -1
	for i := range t.chanWM {
		t.chanWM[i] = abi.MinWatermark
	}
}

// wakeTimer is the timer that ends runGate's wait on the input gate when
// the subtask must wake without input; one timer, reset for each wait.
type wakeTimer struct {
	timer *time.Timer
	armed bool
}

// arm returns the channel that fires in d: due when d has passed (the
// gate's waiting input is taken first).
func (w *wakeTimer) arm(d time.Duration) <-chan time.Time {
	switch {
	case d <= 0:
		return due
	case w.timer == nil:
		w.timer = time.NewTimer(d)
	default:
		w.timer.Reset(d)
	}
	w.armed = true
	return w.timer.C
}

// disarm stops the timer armed for the last wait and drains a fire it
// missed, so that the next wait's Reset starts clean.
func (w *wakeTimer) disarm() {
	if w.armed && !w.timer.Stop() {
		select {
		case <-w.timer.C:
		default:
		}
	}
	w.armed = false
}

func (w *wakeTimer) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// onMessage handles message m from gate channel ch, then a pending
// alignment that outlived its timeout, then flushes the output.
func (t *task) onMessage(ctx context.Context, ch int, m transport.Message) error {
	var err error
	switch m.Kind {
	case transport.KindData:
		t.input = m.Data
		if err = t.machine.Data(ch, len(m.Data)); err == nil {
			err = t.runActions(ctx)
		}
	case transport.KindWatermark:
		if m.Watermark > t.chanWM[ch] {
			t.chanWM[ch] = m.Watermark
		}
		err = t.advanceWatermark(ctx, t.minWatermark())
	case transport.KindBarrier, transport.KindCancel:
		err = t.onBarrier(ctx, ch, m)
	case transport.KindEnd:
		err = t.onEnd(ctx, ch)
	}
	if err != nil {
		return err
	}
	// An alignment that outlived its timeout switches to unaligned even
	// while input keeps arriving on the other channels.
	if at, aligning := t.machine.NextWake(); aligning && time.Now().UnixMilli() >= at {
		if err := t.wakeUp(ctx); err != nil {
			return err
		}
	}
	return t.flush(ctx)
}

// onEnd handles the end of gate channel ch's input.
func (t *task) onEnd(ctx context.Context, ch int) error {
	t.chanWM[ch] = abi.MaxWatermark
	if err := t.machine.EndOfInput(time.Now().UnixMilli(), ch); err != nil {
		return fmt.Errorf("subtask %s: %w", t.label, err)
	}
	if err := t.runActions(ctx); err != nil {
		return err
	}
	if t.machine.Wait() == subtask.WaitInput {
		return t.advanceWatermark(ctx, t.minWatermark())
	}
	return nil
}

// nextWake is the earliest time the loop must wake without input: the next
// processing-time timer, or when the pending alignment times out.
func (t *task) nextWake() (int64, bool) {
	next, ok := t.nextProcessingTimer()
	if at, aligning := t.machine.NextWake(); aligning && (!ok || at < next) {
		next, ok = at, true
	}
	return next, ok
}

// wakeUp tells the machine the time: an alignment past its timeout
// switches to unaligned, and due processing-time timers fire.
func (t *task) wakeUp(ctx context.Context) error {
	if err := t.machine.Tick(time.Now().UnixMilli()); err != nil {
		return err
	}
	return t.runActions(ctx)
}

func (t *task) minWatermark() int64 {
	wm := abi.MaxWatermark
	for _, w := range t.chanWM {
		if w < wm {
			wm = w
		}
	}
	return wm
}

// deliver feeds batch into stage k; k == len(stages) is the chain's end (the
// sink or the output edges).
func (t *task) deliver(ctx context.Context, k int, batch []byte) error {
	if k == len(t.stages) {
		return t.emitTail(ctx, batch)
	}
	s := t.stages[k]
	if t.firstRecord != nil {
		t.firstRecord()
		t.firstRecord = nil
	}
	s.in.Add(int64(abi.Count(batch)))
	s.inBytes.Add(int64(len(batch)))
	if t.dl != nil && s.guest {
		return t.processGuarded(ctx, k, batch, false)
	}
	if err := s.op.Process(batch, &s.coll); err != nil {
		return t.stageError(s, "failed processing a batch", err)
	}
	return t.drain(ctx, k)
}

// drain moves what stage k collected in its last call to the next stage;
// for a stage that routed its output as it came (stageCollector.tail), it
// sends the buffers that filled.
func (t *task) drain(ctx context.Context, k int) error {
	c := &t.stages[k].coll
	if c.routed > 0 {
		t.stages[k].out.Add(int64(c.routed))
		t.stages[k].outBytes.Add(int64(c.routedBytes))
		c.routed, c.routedBytes = 0, 0
		if err := t.sendFull(ctx); err != nil {
			return err
		}
	}
	if c.b.Len() == 0 {
		return nil
	}
	t.stages[k].out.Add(int64(c.b.Len()))
	t.stages[k].outBytes.Add(int64(c.b.Size()))
	b := c.take()
	err := t.deliver(ctx, k+1, b.Bytes())
	c.give(b)
	return err
}

func (t *task) emitTail(ctx context.Context, batch []byte) error {
	if t.sink != nil {
		t.sinkIn.Add(int64(abi.Count(batch)))
		t.sinkInBytes.Add(int64(len(batch)))
		if err := t.sink.Write(batch); err != nil {
			v := t.chain.Vertices[len(t.chain.Vertices)-1]
			return fmt.Errorf("sink %q (vertex %s, subtask %d): %w", v.Connector, v.ID, t.subtask, err)
		}
		return nil
	}
	rd, err := abi.NewReader(batch)
	if err != nil {
		return err
	}
	var r abi.Record
	for {
		ok, err := rd.Next(&r)
		if err != nil {
			return err
		}
		if !ok {
			return t.sendFull(ctx)
		}
		t.routeRecord(&r)
	}
}

// advanceWatermark moves the subtask's event time forward: timers fire stage
// by stage in chain order (so a stage's timer output reaches the next stage
// before that stage's own timers), then the watermark goes downstream.
func (t *task) advanceWatermark(ctx context.Context, wm int64) error {
	if wm <= t.wm {
		return nil
	}
	t.wm = wm
	t.wmPub.Store(wm)
	for k := range t.stages {
		if err := t.fireTimers(ctx, k, abi.TimeEvent, wm); err != nil {
			return err
		}
	}
	if len(t.outs) == 0 {
		return nil
	}
	return t.broadcast(ctx, transport.Message{Kind: transport.KindWatermark, Watermark: wm})
}

// fireTimers calls stage k with its timers of domain due at upTo, a batch at
// a time, until none is left; timers the stage registers due meanwhile fire
// too. A guest cannot make this loop endless: the host bounds the due
// timers it registers while firing (host.Limits.MaxCascadedTimers), and the
// loop checks ctx and writes state between rounds, so cancelling stops it
// and the write-back cache does not grow with the number of rounds.
func (t *task) fireTimers(ctx context.Context, k int, domain int32, upTo int64) error {
	s := t.stages[k]
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := t.flushState(); err != nil {
			return err
		}
		t.timerBuf.Reset()
		n, err := s.state.PopTimers(domain, upTo, &t.timerBuf)
		if err != nil {
			return t.stageError(s, "firing timers", err)
		}
		if n == 0 {
			return nil
		}
		if t.dl != nil && s.guest {
			err = t.processGuarded(ctx, k, t.timerBuf.Bytes(), true)
			if cap(t.timerBuf.Bytes()) > maxKeptOutput {
				t.timerBuf = abi.Builder{}
			}
			if err != nil {
				return err
			}
			continue
		}
		err = s.op.OnTimers(t.timerBuf.Bytes(), &s.coll)
		if cap(t.timerBuf.Bytes()) > maxKeptOutput {
			t.timerBuf = abi.Builder{}
		}
		if err != nil {
			return t.stageError(s, "failed on a timer", err)
		}
		if err := t.drain(ctx, k); err != nil {
			return err
		}
	}
}

func (t *task) nextProcessingTimer() (int64, bool) {
	var next int64
	found := false
	for _, s := range t.stages {
		if ts, ok := s.state.NextTimer(abi.TimeProcessing); ok && (!found || ts < next) {
			next, found = ts, true
		}
	}
	return next, found
}

func (t *task) fireProcessingTimers(ctx context.Context) error {
	now := t.now().UnixMilli()
	for k := range t.stages {
		if err := t.fireTimers(ctx, k, abi.TimeProcessing, now); err != nil {
			return err
		}
	}
	return t.flush(ctx)
}

func (t *task) closeSink() error {
	err := t.sink.Close()
	t.sink = nil
	if err != nil {
		v := t.chain.Vertices[len(t.chain.Vertices)-1]
		return fmt.Errorf("sink %q (vertex %s, subtask %d): closing: %w", v.Connector, v.ID, t.subtask, err)
	}
	return nil
}

// metrics reports records in and out per vertex of the chain.
func (t *task) metrics() []transport.VertexMetrics {
	var out []transport.VertexMetrics
	vs := t.chain.Vertices
	k := 0
	for i, v := range vs {
		m := transport.VertexMetrics{Vertex: v.ID}
		switch {
		case i == 0 && t.source != nil:
			m.RecordsOut = t.srcOut.Load()
		case v.Kind == job.KindSink:
			m.RecordsIn = t.sinkIn.Load()
		default:
			s := t.stages[k]
			k++
			m.RecordsIn, m.RecordsOut = s.in.Load(), s.out.Load()
			m.DeadLetters = s.dead.Load()
		}
		out = append(out, m)
	}
	return out
}

// close releases the task's resources in reverse order of acquisition.
func (t *task) close() error {
	var first error
	for i := len(t.closers) - 1; i >= 0; i-- {
		if err := t.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	t.closers = nil
	return first
}
