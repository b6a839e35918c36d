package host

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

// hostFuncIndex names the host function of each index (hfEmit, …), to
// check at start-up that the indices follow hostFuncs.
var hostFuncIndex = [numHostFuncs]string{
	hfEmit: abi.ImportEmit, hfEmitBatch: abi.ImportEmitBatch, hfOutputIndex: abi.ImportOutputIndex,
	hfStateRegister: abi.ImportStateRegister, hfStateGet: abi.ImportStateGet, hfStatePut: abi.ImportStatePut,
	hfStateDelete: abi.ImportStateDelete, hfStateIter: abi.ImportStateIter, hfStateGetMany: ImportStateGetMany,
	hfStateWriteBatch: ImportStateWriteBatch, hfTimerRegister: abi.ImportTimerRegister, hfTimerDelete: abi.ImportTimerDelete,
	hfWatermark: abi.ImportWatermark, hfProcTime: abi.ImportProcTime, hfLog: abi.ImportLog, hfFail: abi.ImportFail,
	hfProgressAt: abi.ImportProgressAt, hfCommit: abi.ImportCommit,
}

func init() {
	if len(hostFuncs) != numHostFuncs {
		panic(fmt.Sprintf("host: %d host function indices, hostFuncs has %d", numHostFuncs, len(hostFuncs)))
	}
	for k, f := range hostFuncs {
		if hostFuncIndex[k] != f.name {
			panic(fmt.Sprintf("host: host function index %d is %s, hostFuncs has %s", k, hostFuncIndex[k], f.name))
		}
	}
}

// CallStats counts one operator's guest calls, by kind with a histogram of
// their durations, and the host functions its guest called. The subtask's
// goroutine writes it once per guest call (host-function calls are counted
// in the instance and added at the end of the call), so the per-record host
// functions pay one increment of a plain field; readers (a metrics scrape)
// may read it at any time.
type CallStats struct {
	calls [numPhases]latency
	host  [numHostFuncs]atomic.Int64
}

// CallBuckets are the upper bounds, in seconds, of the guest call duration
// histogram: 1µs to 10s in steps of 1, 2.5 and 5.
var CallBuckets = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// bucketNanos is CallBuckets in nanoseconds, for the hot path.
var bucketNanos = func() [len(bucketsArr)]int64 {
	var b [len(bucketsArr)]int64
	for k, s := range CallBuckets {
		b[k] = int64(s * 1e9)
	}
	return b
}()

// bucketsArr fixes the number of buckets at compile time.
var bucketsArr [22]struct{}

// latency is a histogram of durations with CallBuckets' bounds; counts are
// per bucket (not cumulative), the last one past the largest bound.
type latency struct {
	counts [len(bucketsArr) + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

func (l *latency) observe(d time.Duration) {
	n := int64(d)
	k := 0
	for k < len(bucketNanos) && n > bucketNanos[k] {
		k++
	}
	l.counts[k].Add(1)
	l.sum.Add(n)
}

// CallSnapshot is the histogram of one kind of guest call.
type CallSnapshot struct {
	// Call names the kind: open, process, on_timer, close, pre_barrier,
	// checkpoint_notify (complete or aborted) or alloc.
	Call string
	// Count is the number of calls, Sum their total duration in seconds.
	Count uint64
	Sum   float64
	// Buckets[k] counts the calls that took at most CallBuckets[k]
	// (cumulative, as Prometheus has them).
	Buckets []uint64
}

// Merge adds o, a snapshot of the same kind of call, to s.
func (s *CallSnapshot) Merge(o CallSnapshot) {
	if s.Buckets == nil {
		s.Buckets = make([]uint64, len(CallBuckets))
	}
	s.Count += o.Count
	s.Sum += o.Sum
	for k := range o.Buckets {
		s.Buckets[k] += o.Buckets[k]
	}
}

// callNames names the guest calls of each phase.
var callNames = [numPhases]string{
	phaseIdle:    "alloc",
	phaseOpen:    "open",
	phaseProcess: "process",
	phaseTimer:   "on_timer",
	phaseClose:   "close",
	phaseBarrier: "pre_barrier",
	phaseNotify:  "checkpoint_notify",
}

// Calls returns the histograms of the kinds of calls made at least once.
func (s *CallStats) Calls() []CallSnapshot {
	var out []CallSnapshot
	for ph := range s.calls {
		l := &s.calls[ph]
		snap := CallSnapshot{Call: callNames[ph], Buckets: make([]uint64, len(CallBuckets))}
		var cum uint64
		for k := range l.counts {
			cum += l.counts[k].Load()
			if k < len(snap.Buckets) {
				snap.Buckets[k] = cum
			}
		}
		if cum == 0 {
			continue
		}
		snap.Count = cum
		snap.Sum = float64(l.sum.Load()) / 1e9
		out = append(out, snap)
	}
	return out
}

// HostCalls returns, by host function name (abi/ABI.md, "Imports"), how
// often the operator's guest called it; functions never called are left
// out.
func (s *CallStats) HostCalls() map[string]int64 {
	out := map[string]int64{}
	for k := range s.host {
		if n := s.host[k].Load(); n > 0 {
			out[hostFuncs[k].name] = n
		}
	}
	return out
}

// observe records a call of phase ph that took d, and the host functions it
// called (i.hostCalls), which it clears.
func (s *CallStats) observe(ph phase, d time.Duration, hostCalls *[numHostFuncs]int64) {
	s.calls[ph].observe(d)
	for k, n := range hostCalls {
		if n != 0 {
			s.host[k].Add(n)
			hostCalls[k] = 0
		}
	}
}

// OperatorWithStats is Operator, with the slot's guest calls and host
// calls counted in st.
func (i *Instance) OperatorWithStats(st *CallStats) operator.Operator {
	s := i.Operator().(*slot)
	s.stats = st
	return s
}
