package host

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

func TestLimitsResolve(t *testing.T) {
	d := DefaultLimits()
	want := Limits{
		MaxRecordsPerInput: 100_000, MaxRecordsPerCall: 1_000_000, MaxOutputBytesPerCall: 32 << 20,
		MaxTimersPerKey: -1, MaxTimersPerSubtask: -1, MaxTimerBytesPerSubtask: -1,
		MaxCascadedTimers: 1_000_000, MaxStateKeyBytes: 64 << 10, MaxStateValueBytes: 16 << 20,
		MaxStateBytesPerCall: 32 << 20, LogLinesPerSecond: 1000, MaxMessageBytes: 64 << 10,
	}
	if d != want {
		t.Errorf("DefaultLimits() = %+v, want %+v", d, want)
	}
	// Negative lifts a quota; sizes are capped at the ABI's maxima.
	l := Limits{MaxRecordsPerCall: -5, LogLinesPerSecond: -1, MaxStateKeyBytes: -1,
		MaxStateValueBytes: 1 << 30, MaxMessageBytes: 100}.resolve()
	if l.MaxRecordsPerCall != -1 || l.LogLinesPerSecond != -1 || l.MaxStateKeyBytes != operator.MaxKeySize ||
		l.MaxStateValueBytes != operator.MaxValueSize || l.MaxMessageBytes != 100 || l.MaxRecordsPerInput != DefaultMaxRecordsPerInput {
		t.Errorf("resolved %+v", l)
	}
	q := l.quotas()
	if q.recordsPerCall != unlimited || q.logLines != unlimited || q.recordsPerInput != DefaultMaxRecordsPerInput {
		t.Errorf("quotas %+v", q)
	}
}

func TestInstanceLimits(t *testing.T) {
	r := newTestRuntime(t, Config{Limits: Limits{MaxRecordsPerCall: 50, MaxTimersPerKey: 7}})
	m := compileWAT(t, r, passWAT)
	plain, err := m.NewInstance(context.Background(), "a/0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(context.Background())
	if l := plain.Limits(); l.MaxRecordsPerCall != 50 || l.MaxTimersPerKey != 7 || l.MaxRecordsPerInput != DefaultMaxRecordsPerInput {
		t.Errorf("runtime limits %+v", l)
	}
	// Options replace only the fields they set; the last one wins.
	inst, err := m.NewInstance(context.Background(), "a/1",
		WithLimits(Limits{MaxRecordsPerCall: 3, LogLinesPerSecond: 9}), WithLimits(Limits{LogLinesPerSecond: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	if l := inst.Limits(); l.MaxRecordsPerCall != 3 || l.MaxTimersPerKey != 7 || l.LogLinesPerSecond != -1 {
		t.Errorf("instance limits %+v", l)
	}
	// The override is in force: passWAT forwards its input.
	s := inst.Operator().(*slot)
	if err := s.Open(testSpec(), newFakeServices()); err != nil {
		t.Fatal(err)
	}
	out := &fakeCollector{}
	if err := s.Process(batchOf(rec(0, 1, "a", ""), rec(0, 2, "b", ""), rec(0, 3, "c", "")), out); err != nil {
		t.Fatalf("three records under a quota of 3: %v", err)
	}
	err = s.Process(batchOf(rec(0, 1, "a", ""), rec(0, 2, "b", ""), rec(0, 3, "c", ""), rec(0, 4, "d", "")), out)
	q := quotaOf(t, err)
	if q.Quota != "MaxRecordsPerCall" || q.Limit != 3 || q.Flag != "--max-records-per-call" || !errors.Is(err, ErrQuotaExceeded) {
		t.Errorf("quota error %+v", q)
	}
	if len(out.records) != 3 {
		t.Errorf("%d records reached the collector, want the first call's 3", len(out.records))
	}
}

func TestQuotaErrorText(t *testing.T) {
	for _, tc := range []struct {
		q    QuotaError
		want string
	}{
		{QuotaError{Quota: "MaxRecordsPerInput", Flag: "--max-records-per-input", Limit: 1000000, What: "emitted 1000001 records for 1 input record"},
			"emitted 1000001 records for 1 input record, over the quota of 1000000 records per input record (--max-records-per-input)"},
		{QuotaError{Quota: "MaxOutputBytesPerCall", Flag: "--max-output-bytes-per-call", Limit: 3 << 10, What: "emitted 4000 bytes of records in one call"},
			"emitted 4000 bytes of records in one call, over the quota of 3072 bytes (3 KiB) of output per call (--max-output-bytes-per-call)"},
		{QuotaError{Quota: "MaxStateBytesPerCall", Flag: "--max-state-bytes-per-call", Limit: 1000, What: "wrote 1100 bytes of state in one call"},
			"wrote 1100 bytes of state in one call, over the quota of 1000 bytes of state writes per call (--max-state-bytes-per-call)"},
	} {
		if got := tc.q.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
	for name := range quotaFlags {
		if !strings.HasPrefix(quotaFlags[name], "--") {
			t.Errorf("flag of %s: %q", name, quotaFlags[name])
		}
	}
}

// TestLogThrottleWindow: lines suppressed in one window are reported when
// a later call ends after the window, even if the guest logs no more.
func TestLogThrottleWindow(t *testing.T) {
	logs := &logSink{}
	r := newTestRuntime(t, Config{Log: logs.log, Limits: Limits{LogLinesPerSecond: 2}})
	m := compileWAT(t, r, moduleWAT(map[string]string{
		abi.ExportProcess: `(data (i32.const 0) "line")
  (func (export "wstream_process") (param $op i32) (param i32 i32) (result i32)
    (local $i i32)
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $op)))
      (call $log (i32.const 1) (i32.const 0) (i32.const 4))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (i32.const 0))`,
	}, ""))
	svc := newFakeServices()
	inst, s := hostileOp(t, context.Background(), m, svc)
	s.index = 5
	if err := s.Process(batchOf(), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
	if len(svc.logs) != 2 || inst.logs.suppressed != 3 {
		t.Fatalf("%d lines, %d suppressed", len(svc.logs), inst.logs.suppressed)
	}
	// The window ends (moved back instead of waiting a second).
	inst.logs.start = inst.logs.start.Add(-time.Second)
	s.index = 0
	if err := s.Process(batchOf(), &fakeCollector{}); err != nil {
		t.Fatal(err)
	}
	if len(svc.logs) != 3 || !strings.HasPrefix(svc.logs[2].msg, "3 guest log lines suppressed") || svc.logs[2].level != abi.LogWarn {
		t.Errorf("logs %+v", svc.logs)
	}
	// A new window allows lines again.
	inst.logs.start = inst.logs.start.Add(-time.Second)
	s.index = 1
	if err := s.Process(batchOf(), &fakeCollector{}); err != nil || len(svc.logs) != 4 {
		t.Errorf("after the window: %v, logs %+v", err, svc.logs)
	}
}

func TestCheckNames(t *testing.T) {
	wasm := testmod.WAT(t, moduleWAT(nil, ""))
	if p := checkNames(wasm); p != "" {
		t.Fatalf("a module without names: %s", p)
	}
	if p := checkNames(withFunctionName(wasm, 3, "main.(*T).run·fm")); p != "" {
		t.Errorf("a plain name: %s", p)
	}
	if p := checkNames(withFunctionName(wasm, 3, "a\nb")); !strings.Contains(p, `gives function 3 the name "a\nb"`) {
		t.Errorf("a name with a newline: %q", p)
	}
	// Module name (subsection 0) and local names (subsection 2).
	section := func(sub byte, payload []byte) []byte {
		body := append([]byte{4}, "name"...)
		body = append(body, sub, byte(len(payload)))
		body = append(body, payload...)
		return append(append(append([]byte(nil), wasm...), 0, byte(len(body))), body...)
	}
	if p := checkNames(section(0, append([]byte{3}, "m\x1bx"...))); !strings.Contains(p, `gives the module the name "m\x1bx"`) {
		t.Errorf("module name: %q", p)
	}
	locals := []byte{1, 2, 2, 5, 2, 'o', 'k', 9, 3, 'b', 0xc2, 0x9b} // function 2: local 5 "ok", local 9 "b\u009b"
	if p := checkNames(section(2, locals)); !strings.Contains(p, `gives local 9 of function 2 the name "b\u009b"`) {
		t.Errorf("local name: %q", p)
	}
	// The runtime refuses such a module.
	r := newTestRuntime(t, Config{})
	_, err := r.Compile(context.Background(), "bad.wasm", withFunctionName(wasm, 3, "\u202eevil"))
	var ve *ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), `\u202eevil`) {
		t.Errorf("Compile: %v", err)
	}
}
