package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
)

// Guest memory of the fuzz guest: a fixed size, which memory.grow cannot
// change, so that the test knows which pairs are in range.
const (
	fuzzPages       = 4
	fuzzMemSize     = fuzzPages * 65536
	fuzzResults     = 1024 // the status of call i at fuzzResults+4i
	fuzzScratch     = 4096 // a region scripts point into
	fuzzScratchSize = fuzzArena - fuzzScratch
	fuzzScratchTS   = fuzzResultsTS + 1 // of the record carrying the scratch region
	fuzzArena       = 65536             // what wstream_alloc always returns
	fuzzMaxCalls    = 24
	fuzzCallSize    = 80 // op u32, pad u32, 9 args u64
	fuzzMaxData     = 4096
	fuzzResultsTS   = -0x5eed5eed // timestamp of the record carrying the statuses
	// The script's offset in the arena: after the operator name "op" in
	// wstream_open, after the batch and record headers (no key) otherwise.
	fuzzOpenScript  = fuzzArena + 2
	fuzzBatchScript = fuzzArena + abi.BatchHeaderSize + abi.RecordHeaderSize
)

// fuzzImport describes a host function as the script calls it: its
// parameters ('i' i32, 'I' i64), its result ('i', 'I' or 0 for none) and
// its pointer/length pairs (indexes of the parameters).
type fuzzImport struct {
	name   string
	params string
	result byte
	pairs  [][2]int
}

// fuzzImports are the host functions by the op codes of a script, with the
// signatures of abi/ABI.md.
var fuzzImports = []fuzzImport{
	{abi.ImportEmit, "iIiiii", 'i', [][2]int{{2, 3}, {4, 5}}},
	{abi.ImportEmitBatch, "ii", 'i', [][2]int{{0, 1}}},
	{abi.ImportOutputIndex, "ii", 'i', [][2]int{{0, 1}}},
	{abi.ImportStateRegister, "iii", 'i', [][2]int{{0, 1}}},
	{abi.ImportStateGet, "iiiiiii", 'i', [][2]int{{1, 2}, {3, 4}, {5, 6}}},
	{abi.ImportStatePut, "iiiiiii", 'i', [][2]int{{1, 2}, {3, 4}, {5, 6}}},
	{abi.ImportStateDelete, "iiiii", 'i', [][2]int{{1, 2}, {3, 4}}},
	{abi.ImportStateIter, "iiiiiiiii", 'i', [][2]int{{1, 2}, {3, 4}, {5, 6}, {7, 8}}},
	{abi.ImportTimerRegister, "iiiiiI", 'i', [][2]int{{1, 2}, {3, 4}}},
	{abi.ImportTimerDelete, "iiiiiI", 'i', [][2]int{{1, 2}, {3, 4}}},
	{abi.ImportWatermark, "", 'I', nil},
	{abi.ImportProcTime, "", 'I', nil},
	{abi.ImportLog, "iii", 0, [][2]int{{1, 2}}},
	{abi.ImportFail, "ii", 0, [][2]int{{0, 1}}},
}

const (
	opStateGet  = 4
	opStateIter = 7
	opFail      = 13
)

// fuzzGuestWAT is the guest: wstream_open, wstream_process and
// wstream_on_timer run the script they are given, wstream_close the last
// one again. run executes the calls of a script and stores each status at
// fuzzResults; then, when the callback may emit, it emits them as one
// record at fuzzResultsTS, and the scratch region as one at fuzzScratchTS. It reads nothing outside the script and the
// statuses, so whatever the host writes into its memory it cannot trap.
func fuzzGuestWAT() string {
	var b strings.Builder
	b.WriteString("(module\n")
	for k, f := range fuzzImports {
		fmt.Fprintf(&b, "  (import \"wstream\" %q (func $f%d", f.name, k)
		for _, p := range f.params {
			fmt.Fprintf(&b, " (param %s)", watValType(byte(p)))
		}
		if f.result != 0 {
			fmt.Fprintf(&b, " (result %s)", watValType(f.result))
		}
		b.WriteString("))\n")
	}
	fmt.Fprintf(&b, "  (memory (export \"memory\") %d %d)\n", fuzzPages, fuzzPages)
	b.WriteString(`  (global $script (mut i32) (i32.const 0))
  (global $len (mut i32) (i32.const 0))
  (func (export "wstream_abi_version") (result i32) (i32.const 1))
  (func (export "wstream_alloc") (param $n i32) (result i32)
    (if (result i32) (i32.le_u (local.get $n) (i32.const ` + fmt.Sprint(fuzzMemSize-fuzzArena) + `))
      (then (i32.const ` + fmt.Sprint(fuzzArena) + `)) (else (i32.const 0))))
  (func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32)
    (call $run (local.get 3) (local.get 4) (i32.const 0)))
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $run (i32.add (local.get 1) (i32.const 24)) (i32.sub (local.get 2) (i32.const 24)) (i32.const 1)))
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32)
    (call $run (i32.add (local.get 1) (i32.const 24)) (i32.sub (local.get 2) (i32.const 24)) (i32.const 1)))
  (func (export "wstream_close") (param i32) (result i32)
    (call $run (global.get $script) (global.get $len) (i32.const 1)))
  (func $run (param $p i32) (param $len i32) (param $report i32) (result i32)
    (local $n i32) (local $i i32) (local $c i32) (local $op i32) (local $r i32)
    (local $a0 i64) (local $a1 i64) (local $a2 i64) (local $a3 i64) (local $a4 i64)
    (local $a5 i64) (local $a6 i64) (local $a7 i64) (local $a8 i64)
    (global.set $script (local.get $p))
    (global.set $len (local.get $len))
    (if (i32.lt_s (local.get $len) (i32.const 4)) (then (return (i32.const 0))))
    ;; At most the calls the script holds, and fuzzMaxCalls.
    (local.set $n (i32.load (local.get $p)))
    (if (i32.gt_u (local.get $n) (i32.div_u (i32.sub (local.get $len) (i32.const 4)) (i32.const 80)))
      (then (local.set $n (i32.div_u (i32.sub (local.get $len) (i32.const 4)) (i32.const 80)))))
    (if (i32.gt_u (local.get $n) (i32.const ` + fmt.Sprint(fuzzMaxCalls) + `))
      (then (local.set $n (i32.const ` + fmt.Sprint(fuzzMaxCalls) + `))))
    (block $end
      (loop $next
        (br_if $end (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $c (i32.add (local.get $p) (i32.add (i32.const 4) (i32.mul (local.get $i) (i32.const 80)))))
        (local.set $op (i32.load (local.get $c)))
        (local.set $a0 (i64.load offset=8 (local.get $c)))
        (local.set $a1 (i64.load offset=16 (local.get $c)))
        (local.set $a2 (i64.load offset=24 (local.get $c)))
        (local.set $a3 (i64.load offset=32 (local.get $c)))
        (local.set $a4 (i64.load offset=40 (local.get $c)))
        (local.set $a5 (i64.load offset=48 (local.get $c)))
        (local.set $a6 (i64.load offset=56 (local.get $c)))
        (local.set $a7 (i64.load offset=64 (local.get $c)))
        (local.set $a8 (i64.load offset=72 (local.get $c)))
        (local.set $r (i32.const 0))
`)
	b.WriteString("        (block $done\n")
	for k := len(fuzzImports) - 1; k >= 0; k-- {
		fmt.Fprintf(&b, "        (block $op%d\n", k)
	}
	b.WriteString("        (br_table")
	for k := range fuzzImports {
		fmt.Fprintf(&b, " $op%d", k)
	}
	b.WriteString(" $done (local.get $op))\n")
	for k, f := range fuzzImports {
		fmt.Fprintf(&b, "        ) ;; $op%d\n", k)
		call := fmt.Sprintf("(call $f%d", k)
		for j, p := range f.params {
			if p == 'i' {
				call += fmt.Sprintf(" (i32.wrap_i64 (local.get $a%d))", j)
			} else {
				call += fmt.Sprintf(" (local.get $a%d)", j)
			}
		}
		call += ")"
		switch f.result {
		case 'i':
			fmt.Fprintf(&b, "        (local.set $r %s)\n", call)
		case 'I':
			fmt.Fprintf(&b, "        (drop %s)\n", call)
		default:
			fmt.Fprintf(&b, "        %s\n", call)
		}
		b.WriteString("        (br $done)\n")
	}
	b.WriteString("        ) ;; $done\n")
	fmt.Fprintf(&b, `        (i32.store (i32.add (i32.const %d) (i32.mul (local.get $i) (i32.const 4))) (local.get $r))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (if (local.get $report)
      (then
        (drop (call $f0 (i32.const 0) (i64.const %d) (i32.const 0) (i32.const 0)
          (i32.const %d) (i32.mul (local.get $n) (i32.const 4))))
        (drop (call $f0 (i32.const 0) (i64.const %d) (i32.const 0) (i32.const 0)
          (i32.const %d) (i32.const %d)))))
    (i32.const 0))
)
`, fuzzResults, fuzzResultsTS, fuzzResults, fuzzScratchTS, fuzzScratch, fuzzScratchSize)
	return b.String()
}

func watValType(t byte) string {
	if t == 'I' {
		return "i64"
	}
	return "i32"
}

// fuzzCall is one call of a script.
type fuzzCall struct {
	op   int
	args [9]uint64
	at   uint32 // address of the call in guest memory
}

// fuzzReader hands out the bytes of a fuzz input, then zeros.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) raw(n int) uint64 {
	var v uint64
	for j := range n {
		v |= uint64(r.byte()) << (8 * j)
	}
	return v
}

// fuzzSpecial are arguments at the edges of what the host checks.
var fuzzSpecial = []uint64{
	0xffffffff, 0x80000000, 0x7fffffff, 0xfffffffe, fuzzMemSize, fuzzMemSize - 1, fuzzMemSize + 1,
	fuzzArena, fuzzResults, 1 << 20, operator.MaxKeySize, operator.MaxKeySize + 1, 1 << 63, 1<<63 - 1, 1 << 62, 0,
}

// arg decodes one argument: a selector byte, then for raw values the value.
//
//	0x00–0x3f  the value itself (lengths, handles, ports, domains, kinds)
//	0x40–0x7f  the data of the script, at a multiple of 4 bytes
//	0x80–0x9f  the scratch region, at a multiple of 512 bytes
//	0xa0–0xaf  the end of memory, minus a multiple of 4 bytes
//	0xb0–0xbf  fuzzSpecial
//	0xc0–0xff  the next 4 bytes (8 for an i64), little-endian
func (r *fuzzReader) arg(wide bool, data uint32) uint64 {
	m := r.byte()
	switch {
	case m < 0x40:
		return uint64(m)
	case m < 0x80:
		return uint64(data + 4*uint32(m-0x40))
	case m < 0xa0:
		return uint64(fuzzScratch + 512*uint32(m-0x80))
	case m < 0xb0:
		return uint64(fuzzMemSize - 4*uint32(m-0xa0))
	case m < 0xc0:
		return fuzzSpecial[m-0xb0]
	case wide:
		return r.raw(8)
	}
	return r.raw(4)
}

// decodeScript turns fuzz input into the script the guest runs at address
// base, and its calls: a count byte, then per call an op byte and the
// arguments of the op's parameters (see arg); the bytes left are the
// script's data, which pointers of the 0x40 selectors point into.
func decodeScript(in []byte, base uint32) ([]byte, []fuzzCall) {
	r := &fuzzReader{b: in}
	n := int(r.byte()) % (fuzzMaxCalls + 1)
	data := base + 4 + uint32(n*fuzzCallSize)
	calls := make([]fuzzCall, n)
	for i := range calls {
		c := &calls[i]
		c.op = int(r.byte()) % len(fuzzImports)
		c.at = base + 4 + uint32(i*fuzzCallSize)
		for j, p := range fuzzImports[c.op].params {
			c.args[j] = r.arg(p == 'I', data)
		}
	}
	script := binary.LittleEndian.AppendUint32(nil, uint32(n))
	for _, c := range calls {
		script = binary.LittleEndian.AppendUint32(script, uint32(c.op))
		script = binary.LittleEndian.AppendUint32(script, 0)
		for _, a := range c.args {
			script = binary.LittleEndian.AppendUint64(script, a)
		}
	}
	return append(script, r.b[:min(len(r.b), fuzzMaxData)]...), calls
}

// pairOK says whether the guest pair (ptr, n) lies in guest memory, as
// abi/ABI.md defines it: a negative length never, an empty range always.
func pairOK(ptr, n uint64) bool {
	l := int32(uint32(n))
	return l == 0 || l > 0 && uint64(uint32(ptr))+uint64(l) <= fuzzMemSize
}

// badPointer says whether call c has a pair outside guest memory.
func (c *fuzzCall) badPointer() bool {
	for _, p := range fuzzImports[c.op].pairs {
		if c.op == opStateIter && p[1] == 6 && int32(uint32(c.args[6])) == -1 {
			continue // after_len -1: no "after"
		}
		if !pairOK(c.args[p[0]], c.args[p[1]]) {
			return true
		}
	}
	return false
}

// writes returns the guest memory the host may write for call c: the out
// buffer of state_get and state_iter.
func (c *fuzzCall) writes() (from, to uint64, ok bool) {
	if (c.op != opStateGet && c.op != opStateIter) || c.badPointer() {
		return 0, 0, false
	}
	p, n := uint64(uint32(c.args[len(fuzzImports[c.op].params)-2])), uint64(uint32(c.args[len(fuzzImports[c.op].params)-1]))
	return p, p + n, n > 0
}

func overlaps(a0, a1, b0, b1 uint64) bool { return a0 < b1 && b0 < a1 }

// fuzzWrites are the regions of guest memory the host may have written in
// the calls of an instance so far; known is false once a call may have run
// with other arguments than decoded (see checked).
type fuzzWrites struct {
	regions [][2]uint64
	known   bool
}

func (w *fuzzWrites) add(calls []fuzzCall) {
	for _, ok := range checked(calls) {
		w.known = w.known && ok
	}
	for i := range calls {
		if from, to, ok := calls[i].writes(); ok {
			w.regions = append(w.regions, [2]uint64{from, to})
		}
	}
}

// check fails t when the scratch region the guest reported holds a byte
// that the host wrote outside every out buffer of the calls so far: only
// the host writes there, and memory starts zeroed.
func (w *fuzzWrites) check(t *testing.T, call string, out *fuzzCollector) {
	t.Helper()
	scratch, ok := out.scratch()
	if !ok || !w.known {
		return
	}
next:
	for j, b := range scratch {
		if b == 0 {
			continue
		}
		at := uint64(fuzzScratch + j)
		for _, r := range w.regions {
			if at >= r[0] && at < r[1] {
				continue next
			}
		}
		t.Fatalf("%s: the host wrote %#x at %#x, outside every out buffer %x", call, b, at, w.regions)
	}
}

// checked returns, for each call, whether the test can tell what its status
// must be: not when an earlier call's output may have overwritten the call
// in guest memory (its arguments are then not those decoded), nor when a
// later call's output may have overwritten its status.
func checked(calls []fuzzCall) []bool {
	ok := make([]bool, len(calls))
	for i := range calls {
		ok[i] = true
		for j := range calls {
			from, to, w := calls[j].writes()
			if !w {
				continue
			}
			if j < i && overlaps(from, to, uint64(calls[i].at), uint64(calls[i].at)+fuzzCallSize) {
				ok[i] = false
			}
			if j > i && overlaps(from, to, uint64(fuzzResults+4*i), uint64(fuzzResults+4*i+4)) {
				ok[i] = false
			}
		}
	}
	return ok
}

// fuzzServices is operator.Services over a vertex of a real store.
type fuzzServices struct {
	*state.VertexState
	t    *testing.T
	logs int
}

func (s *fuzzServices) Watermark() int64      { return 100 }
func (s *fuzzServices) ProcessingTime() int64 { return 1_700_000_000_000 }
func (s *fuzzServices) Log(level int32, msg string) {
	s.logs++
	checkEscaped(s.t, "a log line", msg, false)
}

// checkEscaped fails t when text that may hold guest text is not escaped
// (see EscapeGuestText).
func checkEscaped(t *testing.T, what, text string, keepLines bool) {
	t.Helper()
	if !utf8.ValidString(text) {
		t.Fatalf("%s is not valid UTF-8: %q", what, text)
	}
	for _, r := range text {
		if keepLines && (r == '\n' || r == '\t') {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029 {
			t.Fatalf("%s holds the unescaped character %U: %q", what, r, text)
		}
	}
}

// fuzzCollector checks and keeps what the operator emits.
type fuzzCollector struct {
	t       *testing.T
	outputs int
	records []abi.Record
}

func (c *fuzzCollector) Emit(port uint32, ts int64, key, value []byte) error {
	if port >= uint32(c.outputs) {
		c.t.Fatalf("a record reached the collector on port %d of %d outputs", port, c.outputs)
	}
	if len(c.records) < 4096 {
		c.records = append(c.records, abi.Record{Port: port, Timestamp: ts, Key: bytes.Clone(key), Value: bytes.Clone(value)})
	}
	return nil
}

func (c *fuzzCollector) EmitBatch(b []byte) error {
	recs, err := abi.Decode(b)
	if err != nil {
		c.t.Fatalf("a malformed batch reached the collector: %v", err)
	}
	for _, r := range recs {
		if err := c.Emit(r.Port, r.Timestamp, r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

// scratch returns the scratch region the guest reported at the end of the
// call, if it did.
func (c *fuzzCollector) scratch() ([]byte, bool) {
	for i := len(c.records) - 1; i >= 0; i-- {
		if r := c.records[i]; r.Port == 0 && r.Timestamp == fuzzScratchTS && len(r.Value) == fuzzScratchSize {
			return r.Value, true
		}
	}
	return nil, false
}

// statuses returns the statuses the guest reported at the end of the
// call, if it did.
func (c *fuzzCollector) statuses() ([]int32, bool) {
	for i := len(c.records) - 1; i >= 0; i-- {
		if r := c.records[i]; r.Port == 0 && r.Timestamp == fuzzResultsTS && len(r.Key) == 0 && len(r.Value)%4 == 0 {
			st := make([]int32, len(r.Value)/4)
			for j := range st {
				st[j] = int32(binary.LittleEndian.Uint32(r.Value[4*j:]))
			}
			return st, true
		}
	}
	return nil, false
}

// checkCallError checks what an operator call returned: nil or a clean
// GuestError of call.
func checkCallError(t *testing.T, call string, err error) *GuestError {
	t.Helper()
	if err == nil {
		return nil
	}
	var ge *GuestError
	if !errors.As(err, &ge) {
		t.Fatalf("%s returned %T, not a *GuestError: %v", call, err, err)
	}
	var quota *QuotaError
	var rt runtime.Error
	switch {
	case ge.Err == nil:
		t.Fatalf("%s: GuestError without a cause: %v", call, ge)
	case errors.As(ge.Err, &rt):
		t.Fatalf("%s: the host panicked: %v", call, ge)
	case errors.As(ge.Err, &quota):
	case strings.Contains(ge.Message, "recovered by wazero"):
		t.Fatalf("%s: the host panicked: %v", call, ge)
	case errors.Is(ge.Err, ErrGuestFailed), errors.Is(ge.Err, ErrInstanceClosed):
	default:
		t.Fatalf("%s: the guest, which cannot trap, failed with %v: %v", call, ge.Err, ge)
	}
	// A guest's fail("") leaves the message empty (reported, not a crash).
	if ge.Call != call || ge.Message == "" && !errors.Is(ge.Err, ErrGuestFailed) {
		t.Fatalf("%s: GuestError of call %q, message %q", call, ge.Call, ge.Message)
	}
	checkEscaped(t, "the error message", ge.Message, true)
	return ge
}

// checkScript checks the statuses a script's calls returned in a callback
// that may emit.
func checkScript(t *testing.T, call string, calls []fuzzCall, out *fuzzCollector, ge *GuestError) {
	t.Helper()
	failed := false
	for _, c := range calls {
		failed = failed || c.op == opFail
	}
	if ge == nil && failed && allChecked(calls) {
		t.Fatalf("%s called fail but succeeded", call)
	}
	if ge != nil && !errors.Is(ge.Err, ErrGuestFailed) {
		return // stopped by a quota: the statuses were not reported
	}
	st, ok := out.statuses()
	if !ok {
		t.Fatalf("%s: the statuses were not emitted", call)
	}
	if len(st) != len(calls) {
		t.Fatalf("%s: %d statuses for %d calls", call, len(st), len(calls))
	}
	ok2 := checked(calls)
	for i, c := range calls {
		if !ok2[i] || fuzzImports[c.op].result != 'i' {
			continue
		}
		s := st[i]
		if s < abi.StatusNotInCallback {
			t.Fatalf("%s: call %d (%s %x) returned %d, not an ABI status", call, i, fuzzImports[c.op].name, c.args, s)
		}
		if c.op == 3 { // state_register outside wstream_open
			if s != abi.StatusNotInCallback {
				t.Fatalf("%s: state_register returned %d, want NOT_IN_CALLBACK", call, s)
			}
			continue
		}
		if bad := c.badPointer(); bad != (s == abi.StatusBadPointer) {
			t.Fatalf("%s: call %d (%s %x) returned %d (%s); a pair outside memory: %v",
				call, i, fuzzImports[c.op].name, c.args[:len(fuzzImports[c.op].params)], s, abi.StatusText(s), bad)
		}
	}
}

func allChecked(calls []fuzzCall) bool {
	for _, ok := range checked(calls) {
		if !ok {
			return false
		}
	}
	return true
}

// fuzzScriptSeed encodes calls for decodeScript: each is an op followed
// by argument selector bytes; data follows them.
func fuzzScriptSeed(data []byte, calls ...[]byte) []byte {
	b := []byte{byte(len(calls))}
	for _, c := range calls {
		b = append(b, c...)
	}
	return append(b, data...)
}

// raw4 is the selector of a raw i32 argument.
func raw4(v uint32) []byte { return binary.LittleEndian.AppendUint32([]byte{0xc0}, v) }

// raw8 is the selector of a raw i64 argument.
func raw8(v int64) []byte { return binary.LittleEndian.AppendUint64([]byte{0xc0}, uint64(v)) }

func sel(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case int:
			b = append(b, byte(v))
		case []byte:
			b = append(b, v...)
		}
	}
	return b
}

// FuzzHostFunctions runs a guest that calls the host functions with
// arguments the fuzzer chooses: pointers and lengths into and around guest
// memory, handles, ports, domains, times, and batches, keys and names the
// fuzzer writes into guest memory. The guest (fuzzGuestWAT) interprets a
// script of calls that the test encodes from the fuzz input (see
// decodeScript) and passes as the operator's config (wstream_open), as the
// value of an input record (wstream_process) and as the namespace of a
// fired timer (wstream_on_timer); wstream_close runs the last script again.
// Keyed state and timers are a real state.Store's.
//
// Whatever the arguments, the host must not panic, and each call must end
// in nil or a *GuestError whose Err is one of the package's causes (never a
// Go panic that wazero recovered, never a trap of this guest, which cannot
// trap by itself) and whose message is escaped. Within a call, every status
// a host function returns is an ABI status, BAD_POINTER exactly when one of
// its pointer/length pairs lies outside guest memory, the host writes guest
// memory only inside the out buffers of state_get and state_iter, and every
// record that reaches the collector has a valid output port; a call that
// called fail fails.
func FuzzHostFunctions(f *testing.F) {
	// Data of the seeds: "key" at +0, "ns" at +4, "value" at +8, "side" at
	// +16, "s" at +20, "m" at +24, a batch of two records at +28.
	batch := abi.Encode([]abi.Record{{Port: 1, Timestamp: 7, Key: []byte("k"), Value: []byte("v")}, {Port: 0, Timestamp: 8}})
	data := append([]byte("key\x00ns\x00\x00value\x00\x00\x00side"+"s\x00\x00\x00"+"m\x00\x00\x00"), batch...)
	const (
		dKey, dNS, dValue, dSide, dS, dM, dBatch = 0x40, 0x41, 0x42, 0x44, 0x45, 0x46, 0x47
		scratch                                  = 0x80
	)
	open := fuzzScriptSeed(data,
		sel(3, dS, 1, 1),                       // state_register("s", value)
		sel(3, dM, 1, 2),                       // state_register("m", map)
		sel(3, dS, 1, 2),                       // the same name, another kind
		sel(3, dS, 0, 1),                       // an empty name
		sel(0, 0, raw8(1), dKey, 3, dValue, 5), // emit: not in open
		sel(12, 1, dKey, 3),
	)
	process := fuzzScriptSeed(data,
		sel(5, 0, dKey, 3, dNS, 2, dValue, 5),                   // state_put
		sel(4, 0, dKey, 3, dNS, 2, scratch, 0x3f),               // state_get
		sel(4, 0, dKey, 3, dNS, 2, scratch, 2),                  // state_get, out too small
		sel(5, 1, dKey, 3, dNS, 2, dValue, 5),                   // state_put, map
		sel(7, 1, dKey, 3, dNS, 0, 0xb0+3, 0xb0, scratch, 0x3f), // state_iter, no after
		sel(7, 1, dKey, 3, dNS, 1, dNS, 2, scratch+1, 4),        // state_iter, out too small
		sel(6, 0, dKey, 3, dNS, 2),                              // state_delete
		sel(0, 1, raw8(9), dKey, 3, dValue, 5),                  // emit on side
		sel(0, 2, raw8(9), dKey, 3, dValue, 5),                  // emit on a port that does not exist
		sel(1, dBatch, len(batch)),                              // emit_batch
		sel(1, dBatch, len(batch)-1),                            // a truncated batch
		sel(2, dSide, 4),                                        // output_index("side")
		sel(8, 0, dKey, 3, dNS, 2, raw8(50)),                    // timer_register, event time
		sel(8, 1, dKey, 3, dNS, 2, raw8(1<<40)),                 // processing time
		sel(9, 0, dKey, 3, dNS, 2, raw8(50)),                    // timer_delete
		sel(8, 2, dKey, 3, dNS, 2, raw8(50)),                    // a domain that does not exist
		sel(10), sel(11),
		sel(12, 2, dValue, 5),                           // log
		sel(4, 0, 0xb1, 0xb2, dNS, 2, scratch, 4),       // bad pointers
		sel(5, 0, dKey, 3, 0xa1, 8, dValue, 5),          // a range past the end of memory
		sel(0, 0, raw8(1), 0xb0, 0xb0, raw4(5), 0xb0+7), // near 2^32
	)
	timers := fuzzScriptSeed(data,
		sel(8, 0, dKey, 3, dNS, 2, raw8(10)), // due at watermark 100: a cascade
		sel(8, 0, dKey, 3, dNS, 1, raw8(20)),
		sel(0, 0, raw8(1), dKey, 3, dValue, 5),
		sel(13, dValue, 5), // fail
	)
	escape := fuzzScriptSeed([]byte("\x1b[31mred\x00\r\n\u202e"), sel(12, 1, 0x40, 11), sel(13, 0x40, 11))
	f.Add(open, process, timers)
	f.Add(open, escape, escape)
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add(open, fuzzScriptSeed(nil, sel(4, 0xff, 0xc0)), []byte{fuzzMaxCalls})

	wasm := testmod.WAT(f, fuzzGuestWAT())
	var logT *testing.T // the test in progress, for the runtime's log
	rt, err := NewRuntime(context.Background(), Config{CallTimeout: 5 * time.Second, Log: func(_ int32, _ string, _ int, msg string) {
		if logT != nil {
			checkEscaped(logT, "a runtime log line", msg, true)
		}
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = rt.Close(context.Background()) })
	mod, err := rt.Compile(context.Background(), "fuzz.wasm", wasm)
	if err != nil {
		f.Fatal(err)
	}
	// Tight quotas, so that scripts reach them.
	limits := WithLimits(Limits{
		MaxRecordsPerInput: 40, MaxRecordsPerCall: 60, MaxOutputBytesPerCall: 256 << 10,
		MaxTimersPerKey: 6, MaxTimersPerSubtask: 20, MaxTimerBytesPerSubtask: 64 << 10, MaxCascadedTimers: 4,
		MaxStateKeyBytes: 1024, MaxStateValueBytes: 128 << 10, MaxStateBytesPerCall: 512 << 10,
		LogLinesPerSecond: 50, MaxMessageBytes: 256,
	})
	const maxPar = 128
	storeDir := f.TempDir()
	var store *state.Store
	execs := 0
	f.Cleanup(func() {
		if store != nil {
			_ = store.Close()
		}
	})

	f.Fuzz(func(t *testing.T, openIn, processIn, timersIn []byte) {
		logT = t
		defer func() { logT = nil }()
		// A fresh vertex per input; a fresh store now and then, so that
		// the state written does not pile up.
		if store == nil || execs%500 == 0 {
			if store != nil {
				_ = store.Close()
				_ = os.RemoveAll(store.Dir())
			}
			dir, err := os.MkdirTemp(storeDir, "store")
			if err != nil {
				t.Fatal(err)
			}
			if store, err = state.Open(state.Options{Dir: dir, MaxParallelism: maxPar, KeyGroups: abi.KeyGroupRange{Start: 0, End: maxPar/2 - 1}}); err != nil {
				t.Fatal(err)
			}
		}
		execs++
		svc := &fuzzServices{VertexState: store.Vertex(fmt.Sprintf("v%d", execs), true), t: t}
		defer func() {
			if err := store.Flush(); err != nil {
				t.Fatalf("flush: %v", err)
			}
		}()

		inst, err := mod.NewInstance(context.Background(), "fuzz/0", limits)
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(context.Background())
		op := inst.Operator()
		openScript, openCalls := decodeScript(openIn, fuzzOpenScript)
		writes := &fuzzWrites{known: true}
		writes.add(openCalls)
		spec := operator.Spec{VertexID: "v", Operator: "op", Config: openScript, Outputs: []string{"main", "side"},
			Subtask: 0, Parallel: 2, MaxParallelism: maxPar, Keyed: true}
		if ge := checkCallError(t, abi.ExportOpen, op.Open(spec, svc)); ge != nil {
			return // the slot is not open: nothing more to call
		}

		script, calls := decodeScript(processIn, fuzzBatchScript)
		out := &fuzzCollector{t: t, outputs: 2}
		batch := abi.Encode([]abi.Record{{Port: 0, Timestamp: 1, Value: script}})
		ge := checkCallError(t, abi.ExportProcess, op.Process(batch, out))
		writes.add(calls)
		if ge == nil || errors.Is(ge.Err, ErrGuestFailed) {
			checkScript(t, abi.ExportProcess, calls, out, ge)
			writes.check(t, abi.ExportProcess, out)
		}

		script, calls = decodeScript(timersIn, fuzzBatchScript)
		out = &fuzzCollector{t: t, outputs: 2}
		fired := abi.Encode([]abi.Record{{Port: uint32(abi.TimeEvent), Timestamp: 50, Value: script}})
		ge = checkCallError(t, abi.ExportOnTimer, op.OnTimers(fired, out))
		writes.add(calls)
		if ge == nil || errors.Is(ge.Err, ErrGuestFailed) {
			checkScript(t, abi.ExportOnTimer, calls, out, ge)
			writes.check(t, abi.ExportOnTimer, out)
		}

		out = &fuzzCollector{t: t, outputs: 2}
		checkCallError(t, abi.ExportClose, op.Close(out))
	})
}
