package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/operator"
)

const memEnd = 2 << 16 // the test modules' memory: 2 pages

// hostCall is one host function called with good arguments, and the
// positions of its pointer/length pairs.
type hostCall struct {
	name  string
	ph    phase
	args  []uint64
	pairs [][2]int
	void  bool
}

// Guest memory used by hostCalls: "abc" at 100, "main" at 400, an empty
// batch at 2000, an output buffer at 1000, a state_get_many request for
// ("abc", "a") at 3000, a state_write_batch put of it at 3100 (their bytes
// from 3200 on).
func hostCalls() []hostCall {
	return []hostCall{
		{name: abi.ImportEmit, ph: phaseProcess, args: []uint64{0, 5, 100, 3, 100, 3}, pairs: [][2]int{{2, 3}, {4, 5}}},
		{name: abi.ImportEmitBatch, ph: phaseProcess, args: []uint64{2000, 4}, pairs: [][2]int{{0, 1}}},
		{name: abi.ImportOutputIndex, ph: phaseProcess, args: []uint64{400, 4}, pairs: [][2]int{{0, 1}}},
		{name: abi.ImportStateRegister, ph: phaseOpen, args: []uint64{400, 4, 1}, pairs: [][2]int{{0, 1}}},
		{name: abi.ImportStateGet, ph: phaseProcess, args: []uint64{0, 100, 3, 100, 1, 1000, 64}, pairs: [][2]int{{1, 2}, {3, 4}, {5, 6}}},
		{name: abi.ImportStatePut, ph: phaseProcess, args: []uint64{0, 100, 3, 100, 1, 100, 3}, pairs: [][2]int{{1, 2}, {3, 4}, {5, 6}}},
		{name: abi.ImportStateDelete, ph: phaseProcess, args: []uint64{0, 100, 3, 100, 1}, pairs: [][2]int{{1, 2}, {3, 4}}},
		{name: abi.ImportStateIter, ph: phaseProcess, args: []uint64{0, 100, 3, 100, 1, 100, 1, 1000, 64}, pairs: [][2]int{{1, 2}, {3, 4}, {5, 6}, {7, 8}}},
		{name: abi.ImportTimerRegister, ph: phaseProcess, args: []uint64{0, 100, 3, 100, 1, 77}, pairs: [][2]int{{1, 2}, {3, 4}}},
		{name: abi.ImportTimerDelete, ph: phaseProcess, args: []uint64{1, 100, 3, 100, 1, 77}, pairs: [][2]int{{1, 2}, {3, 4}}},
		{name: ImportStateGetMany, ph: phaseProcess, args: []uint64{0, 3000, 16, 1000, 64}, pairs: [][2]int{{1, 2}, {3, 4}}},
		{name: ImportStateWriteBatch, ph: phaseProcess, args: []uint64{3100, 28}, pairs: [][2]int{{0, 1}}},
		{name: abi.ImportLog, ph: phaseProcess, args: []uint64{1, 100, 3}, pairs: [][2]int{{1, 2}}, void: true},
		{name: abi.ImportFail, ph: phaseProcess, args: []uint64{100, 3}, pairs: [][2]int{{0, 1}}, void: true},
	}
}

func newHostRig(t *testing.T) *rig {
	g := newRig(t, nil)
	g.write(100, []byte("abc"))
	g.write(400, []byte("main"))
	g.write(2000, []byte{0, 0, 0, 0})
	g.write(3000, g.getRequests(3200, "abc", "a"))
	g.write(3100, g.stateWrites(3300, write{key: "abc", ns: "a", val: "xyz"}))
	if h, err := g.svc.RegisterState("s", abi.StateValue); err != nil || h != 0 {
		t.Fatalf("RegisterState = %d, %v", h, err)
	}
	g.svc.calls = nil
	return g
}

func TestHostFunctionsCoverTheABI(t *testing.T) {
	covered := map[string]bool{abi.ImportWatermark: true, abi.ImportProcTime: true, // no pointers
		abi.ImportProgressAt: true, // one fixed-size pointer: TestProgressAtChecksTheAddress
		abi.ImportCommit:     true} // no pointer: TestCommitKeepsTheGuestsWord
	for _, c := range hostCalls() {
		covered[c.name] = true
	}
	for _, f := range hostFuncs {
		if !covered[f.name] {
			t.Errorf("host function %s has no bounds-check case", f.name)
		}
	}
	if len(hostFuncs) != 18 {
		t.Errorf("%d host functions, abi/ABI.md lists 18", len(hostFuncs))
	}
}

func TestHostFunctionBadPointers(t *testing.T) {
	bad := []struct {
		name     string
		ptr, len uint64
	}{
		{"negative length", 100, uint64(uint32(0xffffffff))},
		{"large negative length", 100, 0x80000000},
		{"past the end", memEnd - 4, 8},
		{"just past the end", memEnd, 1},
		{"near 2^32", 0xfffffff0, 32},
		{"at 2^32-1", 0xffffffff, 2},
	}
	for _, c := range hostCalls() {
		t.Run(c.name, func(t *testing.T) {
			g := newHostRig(t)
			if err := g.svc.StatePut(0, []byte("abc"), []byte("a"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			g.svc.calls = nil
			// Good arguments reach the Services, the Collector or the log.
			st := g.call(c.ph, c.name, c.args...)
			if !c.void && st < 0 {
				t.Fatalf("good arguments: status %d (%s)", st, abi.StatusText(st))
			}
			if len(g.svc.calls)+len(g.out.records)+len(g.svc.logs) == 0 && c.name != abi.ImportOutputIndex && c.name != abi.ImportFail && c.name != abi.ImportEmitBatch {
				t.Fatalf("good arguments had no effect")
			}
			for _, p := range c.pairs {
				for _, b := range bad {
					g.svc.calls, g.svc.logs, g.out.records, g.inst.failed = nil, nil, nil, false
					args := append([]uint64(nil), c.args...)
					args[p[0]], args[p[1]] = b.ptr, b.len
					if c.name == abi.ImportStateIter && p[1] == 6 && int32(uint32(b.len)) == -1 {
						args[p[1]] = uint64(uint32(0xfffffffe)) // -1 means "no after": use -2
					}
					st := g.call(c.ph, c.name, args...)
					what := fmt.Sprintf("arg %d=%#x arg %d=%d (%s)", p[0], b.ptr, p[1], int32(uint32(b.len)), b.name)
					if !c.void && st != abi.StatusBadPointer {
						t.Errorf("%s: status %d, want BAD_POINTER", what, st)
					}
					if len(g.svc.calls) != 0 || len(g.out.records) != 0 {
						t.Errorf("%s: reached the backend: %q, %d records", what, g.svc.calls, len(g.out.records))
					}
					if len(g.svc.logs) != 1 {
						t.Errorf("%s: %d log lines, want the one warning: %+v", what, len(g.svc.logs), g.svc.logs)
						continue
					}
					l := g.svc.logs[0]
					for _, w := range []string{"wstream." + c.name, "operator v1 (op) subtask 3", "outside guest memory"} {
						if !strings.Contains(l.msg, w) {
							t.Errorf("%s: log %q lacks %q", what, l.msg, w)
						}
					}
					if l.level != abi.LogWarn {
						t.Errorf("%s: log level %d", what, l.level)
					}
					if c.name == abi.ImportFail && (!g.inst.failed || !strings.Contains(string(g.inst.failMsg), "outside its memory")) {
						t.Errorf("%s: fail recorded %v %q", what, g.inst.failed, g.inst.failMsg)
					}
				}
			}
		})
	}
}

func TestHostFunctionsOutsideCallback(t *testing.T) {
	g := newHostRig(t)
	for _, c := range hostCalls() {
		if c.void {
			continue
		}
		if st := g.call(phaseIdle, c.name, c.args...); st != abi.StatusNotInCallback {
			t.Errorf("%s outside a callback: status %d, want NOT_IN_CALLBACK", c.name, st)
		}
	}
	// state_register only in open; emit and emit_batch only with a collector.
	if st := g.call(phaseProcess, abi.ImportStateRegister, 400, 4, 1); st != abi.StatusNotInCallback {
		t.Errorf("state_register in process: %d", st)
	}
	for _, ph := range []phase{phaseOpen, phaseNotify} {
		if st := g.call(ph, abi.ImportEmit, 0, 5, 100, 3, 100, 3); st != abi.StatusNotInCallback {
			t.Errorf("emit in phase %d: %d", ph, st)
		}
		if st := g.call(ph, abi.ImportEmitBatch, 2000, 4); st != abi.StatusNotInCallback {
			t.Errorf("emit_batch in phase %d: %d", ph, st)
		}
	}
	if len(g.svc.calls) != 0 || len(g.out.records) != 0 {
		t.Errorf("calls outside callbacks reached the backend: %q", g.svc.calls)
	}
	// fail outside a callback is logged, not recorded; log goes to Config.Log.
	g.call(phaseIdle, abi.ImportFail, 100, 3)
	if g.inst.failed {
		t.Error("fail outside a callback was recorded")
	}
	g.call(phaseIdle, abi.ImportLog, 2, 100, 3)
	if e, ok := g.logs.find("abc"); !ok || e.level != 2 || e.operator != "v1 (op)" || e.subtask != 3 {
		t.Errorf("log outside a callback: %+v %v", e, ok)
	}
	g.inst.stack[0] = 0
	g.call(phaseIdle, abi.ImportWatermark)
	if int64(g.inst.stack[0]) != abi.MinWatermark {
		t.Errorf("current_watermark outside a callback = %d", int64(g.inst.stack[0]))
	}
}

func TestEmitAndOutputIndex(t *testing.T) {
	g := newHostRig(t)
	g.write(500, []byte("side"))
	if st := g.call(phaseProcess, abi.ImportOutputIndex, 400, 4); st != 0 {
		t.Errorf("output_index(main) = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportOutputIndex, 500, 4); st != 1 {
		t.Errorf("output_index(side) = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportOutputIndex, 500, 3); st != abi.StatusBadOutput {
		t.Errorf("output_index(sid) = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportOutputIndex, 500, 0); st != abi.StatusBadOutput {
		t.Errorf("output_index(\"\") = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportEmit, 1, 42, 100, 2, 101, 2); st != 0 {
		t.Fatalf("emit = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportEmit, 2, 42, 100, 2, 101, 2); st != abi.StatusBadOutput {
		t.Errorf("emit to port 2 of 2 = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportEmit, 0xffffffff, 42, 100, 0, 0xfffffff0, 0); st != abi.StatusBadOutput {
		t.Errorf("emit to port 2^32-1 = %d", st)
	}
	if got, want := g.out.String(), "1@42 \"ab\"=\"bc\"\n"; got != want {
		t.Errorf("emitted %q, want %q", got, want)
	}
}

func TestOutputIndexDefaultsToMain(t *testing.T) {
	g := newRig(t, nil)
	s := g.inst.Operator().(*slot)
	spec := testSpec()
	spec.Outputs = nil
	if err := s.Open(spec, newFakeServices()); err != nil {
		t.Fatal(err)
	}
	g.s = s
	g.write(400, []byte("mainside"))
	if st := g.call(phaseProcess, abi.ImportOutputIndex, 400, 4); st != 0 {
		t.Errorf("output_index(main) = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportOutputIndex, 404, 4); st != abi.StatusBadOutput {
		t.Errorf("output_index(side) = %d", st)
	}
}

func TestCheckBatch(t *testing.T) {
	good := batchOf(rec(0, 1, "a", "b"), rec(1, 2, "", ""))
	trailing := append(append([]byte(nil), good...), 0)
	short := good[:len(good)-1]
	bigCount := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(bigCount, 3)
	smallCount := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(smallCount, 1)
	overrun := batchOf(rec(0, 1, "a", "b"))
	binary.LittleEndian.PutUint32(overrun[4+12:], 0xffffffff)
	badPortThenMalformed := append(batchOf(rec(5, 1, "a", "b")), 1)
	for _, tc := range []struct {
		name    string
		b       []byte
		outputs int
		want    int32
	}{
		{"good", good, 2, abi.StatusOK},
		{"empty batch", batchOf(), 1, abi.StatusOK},
		{"no header", nil, 1, abi.StatusBadArgument},
		{"short header", []byte{1, 0}, 1, abi.StatusBadArgument},
		{"trailing byte", trailing, 2, abi.StatusBadArgument},
		{"truncated record", short, 2, abi.StatusBadArgument},
		{"count too big", bigCount, 2, abi.StatusBadArgument},
		{"count too small", smallCount, 2, abi.StatusBadArgument},
		{"key overruns", overrun, 2, abi.StatusBadArgument},
		{"port = outputs", good, 1, abi.StatusBadOutput},
		{"malformed wins over bad port", badPortThenMalformed, 1, abi.StatusBadArgument},
	} {
		if _, got := checkBatch(tc.b, tc.outputs); got != tc.want {
			t.Errorf("%s: checkBatch = %d, want %d", tc.name, got, tc.want)
		}
	}
	// The largest port, which a CheckedCollector takes instead of a
	// second pass.
	for _, tc := range []struct {
		b    []byte
		want uint32
	}{
		{batchOf(), 0},
		{batchOf(rec(0, 1, "a", "b")), 0},
		{good, 1},
		{batchOf(rec(2, 1, "", ""), rec(0, 1, "", ""), rec(1, 1, "", "")), 2},
	} {
		if got, st := checkBatch(tc.b, 3); st != abi.StatusOK || got != tc.want {
			t.Errorf("checkBatch(%d records) = %d, %d; want %d, OK", abi.Count(tc.b), got, st, tc.want)
		}
	}
}

func TestEmitBatch(t *testing.T) {
	g := newHostRig(t)
	good := batchOf(rec(0, 1, "a", "x"), rec(1, 2, "b", "y"))
	g.write(3000, good)
	if st := g.call(phaseProcess, abi.ImportEmitBatch, 3000, uint64(len(good))); st != 0 {
		t.Fatalf("emit_batch = %d", st)
	}
	if got, want := g.out.String(), "0@1 \"a\"=\"x\"\n1@2 \"b\"=\"y\"\n"; got != want {
		t.Errorf("emitted %q, want %q", got, want)
	}
	// A bad port in the last record emits nothing of the batch.
	g.out.records = nil
	badPort := batchOf(rec(0, 1, "a", "x"), rec(2, 2, "b", "y"))
	g.write(3000, badPort)
	if st := g.call(phaseProcess, abi.ImportEmitBatch, 3000, uint64(len(badPort))); st != abi.StatusBadOutput {
		t.Errorf("bad port: %d", st)
	}
	// So does a malformed batch (one byte short).
	if st := g.call(phaseProcess, abi.ImportEmitBatch, 3000, uint64(len(good)-1)); st != abi.StatusBadArgument {
		t.Errorf("malformed: %d", st)
	}
	if len(g.out.records) != 0 {
		t.Errorf("a refused batch was forwarded: %s", g.out)
	}
}

func TestStateGetPutDelete(t *testing.T) {
	g := newHostRig(t)
	g.write(500, []byte("value-1"))
	if st := g.call(phaseProcess, abi.ImportStateGet, 0, 100, 3, 0, 0, 1000, 64); st != abi.StatusNotFound {
		t.Errorf("get absent = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportStatePut, 0, 100, 3, 0, 0, 500, 7); st != 0 {
		t.Fatalf("put = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportStateGet, 0, 100, 3, 0, 0, 1000, 64); st != 7 {
		t.Fatalf("get = %d", st)
	}
	if got := g.read(1000, 7); string(got) != "value-1" {
		t.Errorf("get copied %q", got)
	}
	// Too small: the length comes back, nothing is copied.
	g.write(1100, []byte("untouched"))
	if st := g.call(phaseProcess, abi.ImportStateGet, 0, 100, 3, 0, 0, 1100, 6); st != 7 {
		t.Errorf("get into 6 bytes = %d, want 7", st)
	}
	if got := g.read(1100, 9); string(got) != "untouched" {
		t.Errorf("a too-small get wrote %q", got)
	}
	// Zero capacity probes the length (any pointer is fine with length 0).
	if st := g.call(phaseProcess, abi.ImportStateGet, 0, 100, 3, 0, 0, 0xffffffff, 0); st != 7 {
		t.Errorf("probe = %d", st)
	}
	// The namespace is part of the address.
	if st := g.call(phaseProcess, abi.ImportStateGet, 0, 100, 3, 100, 1, 1000, 64); st != abi.StatusNotFound {
		t.Errorf("get other namespace = %d", st)
	}
	// A value overlapping its own key is read intact.
	g.write(1200, []byte("kkk"))
	if st := g.call(phaseProcess, abi.ImportStatePut, 0, 1200, 3, 0, 0, 500, 7); st != 0 {
		t.Fatal(st)
	}
	if st := g.call(phaseProcess, abi.ImportStateGet, 0, 1200, 3, 0, 0, 1200, 7); st != 7 || string(g.read(1200, 7)) != "value-1" {
		t.Errorf("overlapping get = %d %q", st, g.read(1200, 7))
	}
	if st := g.call(phaseProcess, abi.ImportStateDelete, 0, 100, 3, 0, 0); st != 0 {
		t.Errorf("delete = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportStateGet, 0, 100, 3, 0, 0, 1000, 64); st != abi.StatusNotFound {
		t.Errorf("get deleted = %d", st)
	}
	if st := g.call(phaseProcess, abi.ImportStateGet, 9, 100, 3, 0, 0, 1000, 64); st != abi.StatusBadHandle {
		t.Errorf("get bad handle = %d", st)
	}
}

func TestStateIter(t *testing.T) {
	g := newHostRig(t)
	for _, e := range [][2]string{{"a1", "x"}, {"a2", "yy"}, {"b1", "zzz"}, {"", "empty"}} {
		if err := g.svc.StatePut(0, []byte("abc"), []byte(e[0]), []byte(e[1])); err != nil {
			t.Fatal(err)
		}
	}
	g.write(200, []byte("a"))
	g.write(300, []byte("a1"))
	decode := func(b []byte) string {
		var out []string
		for len(b) > 0 {
			nl, vl := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
			out = append(out, string(b[8:8+nl])+"="+string(b[8+nl:8+nl+vl]))
			b = b[8+nl+vl:]
		}
		return strings.Join(out, ",")
	}
	iter := func(prefixLen, afterPtr, afterLen, outCap uint64) (int32, string) {
		st := g.call(phaseProcess, abi.ImportStateIter, 0, 100, 3, 200, prefixLen, afterPtr, afterLen, 1000, outCap)
		if st <= 0 {
			return st, ""
		}
		return st, decode(g.read(1000, uint32(st)))
	}
	none := uint64(uint32(0xffffffff)) // after_len -1
	for _, tc := range []struct {
		name                         string
		prefixLen, afterPtr, afterLn uint64
		cap                          uint64
		st                           int32
		want                         string
	}{
		{"all", 0, 0, none, 256, 8 + 5 + 8 + 3 + 8 + 4 + 8 + 5, "=empty,a1=x,a2=yy,b1=zzz"},
		{"after empty namespace", 0, 300, 0, 256, 8 + 3 + 8 + 4 + 8 + 5, "a1=x,a2=yy,b1=zzz"},
		{"prefix a", 1, 0, none, 256, 8 + 3 + 8 + 4, "a1=x,a2=yy"},
		{"prefix a after a1", 1, 300, 2, 256, 8 + 4, "a2=yy"},
		{"two fit", 1, 0, none, 8 + 3 + 8 + 3, 8 + 3, "a1=x"},
		{"first does not fit", 1, 300, 2, 11, abi.StatusLimit, ""},
		{"nothing left", 1, 300, 2 + 0, 0, abi.StatusLimit, ""},
	} {
		st, got := iter(tc.prefixLen, tc.afterPtr, tc.afterLn, tc.cap)
		if st != tc.st || got != tc.want {
			t.Errorf("%s: %d %q, want %d %q", tc.name, st, got, tc.st, tc.want)
		}
	}
	// After the last entry: 0 means done.
	g.write(300, []byte("b1"))
	if st, _ := iter(0, 300, 2, 256); st != 0 {
		t.Errorf("after the last entry: %d", st)
	}
	// The output buffer may overlap the arguments: they are copied first.
	g.write(1000, []byte("abc"))
	if st := g.call(phaseProcess, abi.ImportStateIter, 0, 1000, 3, 0, 0, 0, none, 1000, 256); st != 8+5+8+3+8+4+8+5 {
		t.Errorf("overlapping iter = %d", st)
	}
}

func TestTimersAndTime(t *testing.T) {
	g := newHostRig(t)
	if st := g.call(phaseProcess, abi.ImportTimerRegister, 0, 100, 3, 100, 1, 77); st != 0 {
		t.Fatal(st)
	}
	if st := g.call(phaseProcess, abi.ImportTimerRegister, 1, 100, 3, 0, 0, 78); st != 0 {
		t.Fatal(st)
	}
	if !g.svc.timers[timerKey(0, []byte("abc"), []byte("a"), 77)] || !g.svc.timers[timerKey(1, []byte("abc"), nil, 78)] {
		t.Errorf("timers = %v", g.svc.timers)
	}
	if st := g.call(phaseProcess, abi.ImportTimerDelete, 0, 100, 3, 100, 1, 77); st != 0 || len(g.svc.timers) != 1 {
		t.Errorf("delete = %d, timers %v", st, g.svc.timers)
	}
	for _, domain := range []uint64{2, uint64(uint32(0xffffffff))} {
		if st := g.call(phaseProcess, abi.ImportTimerRegister, domain, 100, 3, 0, 0, 1); st != abi.StatusBadArgument {
			t.Errorf("domain %d: %d", int32(uint32(domain)), st)
		}
	}
	g.svc.watermark, g.svc.procTime = 12345, 67890
	g.call(phaseTimer, abi.ImportWatermark)
	if int64(g.inst.stack[0]) != 12345 {
		t.Errorf("current_watermark = %d", int64(g.inst.stack[0]))
	}
	g.call(phaseTimer, abi.ImportProcTime)
	if int64(g.inst.stack[0]) != 67890 {
		t.Errorf("processing_time = %d", int64(g.inst.stack[0]))
	}
}

func TestStateRegister(t *testing.T) {
	g := newHostRig(t)
	g.write(500, []byte(strings.Repeat("n", operator.MaxNameSize+1)))
	for _, tc := range []struct {
		name       string
		ptr, n, kd uint64
		want       int32
	}{
		{"value", 400, 4, 1, 1}, // handle 0 is taken by the rig's "s"
		{"same again", 400, 4, 1, 1},
		{"other kind", 400, 4, 2, abi.StatusBadArgument},
		{"map", 100, 3, 2, 2},
		{"kind 0", 100, 3, 0, abi.StatusBadArgument},
		{"kind 3", 100, 3, 3, abi.StatusBadArgument},
		{"empty name", 100, 0, 1, abi.StatusBadArgument},
		{"longest name", 500, operator.MaxNameSize, 1, 3},
		{"name too long", 500, operator.MaxNameSize + 1, 1, abi.StatusLimit},
	} {
		if st := g.call(phaseOpen, abi.ImportStateRegister, tc.ptr, tc.n, tc.kd); st != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, st, tc.want)
		}
	}
}

func TestServicesErrorsMapToStatus(t *testing.T) {
	g := newHostRig(t)
	for _, tc := range []struct {
		err   error
		want  int32
		fatal bool
	}{
		{operator.ErrKeyGroup, abi.StatusKeyGroup, false},
		{operator.ErrNoKeyedState, abi.StatusNoKeyedState, false},
		{operator.ErrLimit, abi.StatusLimit, false},
		{fmt.Errorf("wrapped: %w", operator.ErrBadArgument), abi.StatusBadArgument, false},
		{errors.New("disk on fire"), abi.StatusStateError, true},
	} {
		g.svc.err = tc.err
		for _, c := range hostCalls() {
			if !strings.HasPrefix(c.name, "state_") && !strings.HasPrefix(c.name, "timer_") || c.name == abi.ImportStateRegister {
				continue
			}
			g.inst.fatal = nil
			st := g.call(c.ph, c.name, c.args...)
			if c.name == ImportStateGetMany && (tc.want == abi.StatusKeyGroup || tc.want == abi.StatusLimit) {
				// Statuses that depend on the key are the request's result.
				if res := int32(binary.LittleEndian.Uint32(g.read(1004, 4))); st != resultSize || res != tc.want {
					t.Errorf("%s with %v: %d, result %d; want %d, result %d", c.name, tc.err, st, res, resultSize, tc.want)
				}
			} else if st != tc.want {
				t.Errorf("%s with %v: %d, want %d", c.name, tc.err, st, tc.want)
			}
			if (g.inst.fatal != nil) != tc.fatal {
				t.Errorf("%s with %v: fatal = %v", c.name, tc.err, g.inst.fatal)
			}
		}
	}
}
