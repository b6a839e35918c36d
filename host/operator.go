package host

import (
	"fmt"
	"math"
	"slices"

	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

type slotState uint8

const (
	slotNew slotState = iota
	slotOpen
	slotClosed
)

// slot is one operator in an instance: it implements operator.Operator over
// the module's exports, passing its index as the op argument.
type slot struct {
	inst    *Instance
	index   int32
	state   slotState
	spec    operator.Spec
	outputs []string // spec.Outputs, or ["main"]
	svc     operator.Services
	waiter  operator.StorageWaiter // svc's, when it tells its storage waits
	who     string                 // "vertex (operator)" for errors and logs
	// stats, when set, counts the slot's guest and host calls.
	stats *CallStats

	// cascade counts the already-due timers registered by consecutive
	// on_timer calls firing timers of domain cascadeDomain (at watermark
	// cascadeWM for event time): Limits.MaxCascadedTimers.
	cascade       int
	cascadeDomain int32
	cascadeWM     int64
}

var _ operator.Operator = (*slot)(nil)

// Open writes the operator name and config into one guest buffer and calls
// wstream_open(slot, name, config).
func (s *slot) Open(spec operator.Spec, svc operator.Services) error {
	i := s.inst
	if s.state != slotNew {
		return fmt.Errorf("host: instance %s: operator slot %d opened twice", i.label, s.index)
	}
	if svc == nil {
		return fmt.Errorf("host: instance %s: operator slot %d: Open needs Services", i.label, s.index)
	}
	s.spec = spec
	s.spec.Outputs = slices.Clone(spec.Outputs)
	s.outputs = s.spec.Outputs
	if len(s.outputs) == 0 {
		s.outputs = []string{"main"}
	}
	s.svc = svc
	s.waiter, _ = svc.(operator.StorageWaiter)
	// The plan is the module's: its names are guest text too.
	s.who = EscapeGuestText([]byte(spec.VertexID), 256, false)
	if spec.Operator != "" && spec.Operator != spec.VertexID {
		s.who += " (" + EscapeGuestText([]byte(spec.Operator), 256, false) + ")"
	}
	if i.owner == nil {
		i.owner = s
	}
	ptr, err := i.write(s, abi.ExportOpen, spec.Operator, spec.Config)
	if err != nil {
		return err
	}
	nameLen := uint32(len(spec.Operator))
	i.stack[0] = uint64(s.index)
	i.stack[1] = uint64(ptr)
	i.stack[2] = uint64(nameLen)
	i.stack[3] = uint64(ptr + nameLen)
	i.stack[4] = uint64(len(spec.Config))
	st, err := i.call(s, phaseOpen, nil, i.fn(expOpen), abi.ExportOpen, 5)
	if err := s.result(abi.ExportOpen, st, err); err != nil {
		return err
	}
	s.state = slotOpen
	return nil
}

// Process writes the batch into the guest's arena and calls
// wstream_process(slot, batch).
func (s *slot) Process(batch []byte, out operator.Collector) error {
	if err := s.ready(abi.ExportProcess); err != nil {
		return err
	}
	s.cascade = 0
	return s.batchCall(abi.ExportProcess, phaseProcess, batch, out, -1)
}

// OnTimers writes the timer batch into the guest's arena and calls
// wstream_on_timer(slot, timers).
func (s *slot) OnTimers(timers []byte, out operator.Collector) error {
	if err := s.ready(abi.ExportOnTimer); err != nil {
		return err
	}
	i := s.inst
	if err := i.usable(s, abi.ExportOnTimer); err != nil {
		return err
	}
	domain := i.firedTimers(s, timers)
	// Consecutive firings of one domain (and, for event time, of one
	// watermark) are one advance of time, which cascading timers prolong.
	wm := s.svc.Watermark()
	if domain != s.cascadeDomain || (domain == abi.TimeEvent && wm != s.cascadeWM) {
		s.cascade, s.cascadeDomain, s.cascadeWM = 0, domain, wm
	}
	return s.batchCall(abi.ExportOnTimer, phaseTimer, timers, out, domain)
}

// batchCall runs wstream_process or wstream_on_timer (domain ≥ 0: the
// batch holds timers of that domain) on batch.
func (s *slot) batchCall(call string, ph phase, batch []byte, out operator.Collector, domain int32) error {
	i := s.inst
	if err := i.usable(s, call); err != nil {
		return err
	}
	ptr, err := i.write(s, call, "", batch)
	if err != nil {
		return err
	}
	// The arena write may have called wstream_alloc: take the function and
	// set the call's accounting only now.
	k := expProcess
	if ph == phaseTimer {
		k = expOnTimer
	}
	fn := i.fn(k)
	i.inputs, i.inputTimers, i.timerDomain = abi.Count(batch), ph == phaseTimer, domain
	i.stack[0] = uint64(s.index)
	i.stack[1] = uint64(ptr)
	i.stack[2] = uint64(len(batch))
	i.failedAt = -1
	if i.progress != 0 {
		i.mem.WriteUint32Le(i.progress, math.MaxUint32)
	}
	i.commitEvery, i.committed = 0, 0
	if c, ok := out.(operator.Committer); ok {
		i.commitEvery = max(c.CommitInterval(), 0)
	}
	i.inBatch = true
	st, err := i.call(s, ph, out, fn, call, 3)
	if err == nil && (i.failed || i.fatal != nil || st != abi.StatusOK) {
		i.readProgress()
	}
	i.inBatch = false
	return s.result(call, st, err)
}

// PreBarrier calls wstream_pre_barrier(slot, checkpoint) when exported.
func (s *slot) PreBarrier(checkpoint int64, out operator.Collector) error {
	return s.hook(abi.ExportPreBarrier, phaseBarrier, s.inst.fn(expPreBarrier), checkpoint, out)
}

// CheckpointComplete calls wstream_checkpoint_complete(slot, checkpoint)
// when exported.
func (s *slot) CheckpointComplete(checkpoint int64) error {
	return s.hook(abi.ExportCkptComplete, phaseNotify, s.inst.fn(expCkptComplete), checkpoint, nil)
}

// CheckpointAborted calls wstream_checkpoint_aborted(slot, checkpoint) when
// exported.
func (s *slot) CheckpointAborted(checkpoint int64) error {
	return s.hook(abi.ExportCkptAborted, phaseNotify, s.inst.fn(expCkptAborted), checkpoint, nil)
}

func (s *slot) hook(call string, ph phase, fn api.Function, checkpoint int64, out operator.Collector) error {
	if err := s.ready(call); err != nil {
		return err
	}
	if fn == nil {
		return s.inst.usable(s, call)
	}
	i := s.inst
	i.stack[0] = uint64(s.index)
	i.stack[1] = uint64(checkpoint)
	st, err := i.call(s, ph, out, fn, call, 2)
	return s.result(call, st, err)
}

// Close calls wstream_close(slot); the operator may still emit into out.
// The slot is closed afterwards whatever the outcome.
func (s *slot) Close(out operator.Collector) error {
	if err := s.ready(abi.ExportClose); err != nil {
		return err
	}
	s.state = slotClosed
	s.cascade = 0
	i := s.inst
	i.stack[0] = uint64(s.index)
	st, err := i.call(s, phaseClose, out, i.fn(expClose), abi.ExportClose, 1)
	return s.result(abi.ExportClose, st, err)
}

// ready refuses calls on a slot that is not open.
func (s *slot) ready(call string) error {
	switch s.state {
	case slotNew:
		return fmt.Errorf("host: instance %s: operator slot %d: %s before Open", s.inst.label, s.index, call)
	case slotClosed:
		return fmt.Errorf("host: operator %s subtask %d: %s after Close", s.who, s.spec.Subtask, call)
	}
	return nil
}

// result turns the outcome of a guest export into an error: a host-side
// failure during the call first (it is the cause), then fail's message,
// then a non-zero status.
func (s *slot) result(call string, st int32, err error) error {
	if err != nil {
		return err
	}
	i := s.inst
	if i.fatal != nil {
		err := fmt.Errorf("host: operator %s subtask %d: %s: %w", s.who, s.spec.Subtask, call, i.fatal)
		i.fatal = nil
		return err
	}
	if i.failed {
		msg := string(i.failMsg)
		if msg == "" {
			msg = "the guest called fail with an empty message"
		}
		return &GuestError{Operator: s.who, Subtask: s.spec.Subtask, Call: call, Status: st,
			Message: msg, Err: ErrGuestFailed}
	}
	if st == abi.StatusOK {
		return nil
	}
	msg := fmt.Sprintf("returned status %d (%s)", st, abi.StatusText(st))
	if call == abi.ExportOpen && st == abi.StatusUnknownOp {
		msg = fmt.Sprintf("the module has no operator %q (%s returned %d)", s.spec.Operator, call, st)
	}
	return &GuestError{Operator: s.who, Subtask: s.spec.Subtask, Call: call, Status: st, Message: msg, Err: ErrGuestFailed}
}
