package instrument

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// The WAT corpus: one module per feature class that the decoder knows and
// that wabt assembles, each with loops, calls and exits of every kind.
var corpus = map[string]string{
	// The MVP: control (blocks with results, branches and br_table out of
	// the function, return, calls, indirect calls), every load and store,
	// constants, numbers, globals, imports, a start function.
	"mvp": `(module
  (type $un (func (param i32) (result i32)))
  (import "env" "host" (func $host (param i32) (result i32)))
  (import "genv" "g" (global $g i32))
  (table 4 funcref)
  (memory 1)
  (global $m (mut i64) (i64.const 5))
  (global $started (mut i32) (i32.const 0))
  (elem (i32.const 0) $fact $sum $fact)
  (data (i32.const 16) "hello")
  (func $init (global.set $started (i32.const 42)))
  (start $init)
  (func (export "started") (result i32) (global.get $started))
  (func $fact (export "fact") (type $un)
    (if (result i32) (i32.le_s (local.get 0) (i32.const 1))
      (then (i32.const 1))
      (else (i32.mul (local.get 0) (call $fact (i32.sub (local.get 0) (i32.const 1)))))))
  (func $sum (export "sum") (param $n i32) (result i32) (local $i i32) (local $acc i32)
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $acc (i32.add (local.get $acc) (local.get $i)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (local.get $acc))
  (func (export "indirect") (param i32 i32) (result i32)
    (call_indirect (type $un) (local.get 1) (local.get 0)))
  (func (export "host") (param i32) (result i32) (call $host (local.get 0)))
  (global $out (mut i32) (i32.const 0))
  (func $tab (param $k i32)
    (loop $l
      (global.set $out (i32.add (global.get $out) (i32.const 1)))
      (local.set $k (i32.sub (local.get $k) (i32.const 1)))
      (block $a (block $b
        (br_table $a $b $l 3 (local.get $k)))
        (global.set $out (i32.add (global.get $out) (i32.const 100)))
        (return))
      (global.set $out (i32.add (global.get $out) (i32.const 10)))
      (br_if $l (i32.gt_s (local.get $k) (i32.const 0)))))
  (func (export "table") (param i32) (result i32)
    (global.set $out (i32.const 0))
    (call $tab (local.get 0))
    (global.get $out))
  (func (export "early") (param $n i32) (result i32)
    (loop $l
      (br_if 1 (i32.const 7) (i32.eqz (local.get $n)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $l))
    (i32.const -1))
  (func (export "deep") (param $n i32) (param $f f64) (result i32) (local $i i32) (local $x i64)
    (i32.add (i32.const 1000) ;; on the stack below the loop, across its slow path
      (loop $l (result i32)
        (local.set $i (i32.add (local.get $i) (i32.const 3)))
        (local.set $x (i64.add (i64.mul (local.get $x) (i64.const 31)) (i64.extend_i32_u (local.get $i))))
        (local.set $f (f64.add (local.get $f) (f64.const 0.5)))
        (br_if $l (i32.lt_u (local.get $i) (local.get $n)))
        (i32.add (i32.wrap_i64 (local.get $x)) (i32.trunc_f64_s (local.get $f))))))
  (func (export "memory") (param $a i32) (result i64)
    (i32.store (local.get $a) (i32.const -2))
    (i64.store offset=8 align=4 (local.get $a) (i64.const 0x1122334455667788))
    (f32.store offset=16 (local.get $a) (f32.const 1.5))
    (f64.store offset=24 (local.get $a) (f64.const -2.25))
    (i32.store8 offset=32 (local.get $a) (i32.const 0x1ff))
    (i32.store16 offset=34 (local.get $a) (i32.const 0x1ffff))
    (i64.store8 offset=36 (local.get $a) (i64.const 7))
    (i64.store16 offset=38 (local.get $a) (i64.const 8))
    (i64.store32 offset=40 (local.get $a) (i64.const 9))
    (drop (memory.grow (i32.const 0)))
    (i64.add
      (i64.add
        (i64.add (i64.extend_i32_s (i32.load (local.get $a))) (i64.load offset=8 (local.get $a)))
        (i64.add (i64.trunc_f32_s (f32.load offset=16 (local.get $a))) (i64.trunc_f64_s (f64.load offset=24 (local.get $a)))))
      (i64.add
        (i64.add (i64.extend_i32_u (i32.add (i32.load8_s offset=32 (local.get $a)) (i32.load8_u offset=32 (local.get $a))))
                 (i64.extend_i32_u (i32.add (i32.load16_s offset=34 (local.get $a)) (i32.load16_u offset=34 (local.get $a)))))
        (i64.add
          (i64.add (i64.load8_s offset=36 (local.get $a)) (i64.load8_u offset=36 (local.get $a)))
          (i64.add (i64.add (i64.load16_s offset=38 (local.get $a)) (i64.load16_u offset=38 (local.get $a)))
                   (i64.add (i64.load32_s offset=40 (local.get $a)) (i64.add (i64.load32_u offset=40 (local.get $a))
                     (i64.extend_i32_u (memory.size)))))))))
  (func (export "numbers") (param $x i32) (result f64)
    (local $y i64) (local $f f32)
    (local.set $y (i64.rotl (i64.mul (i64.extend_i32_s (local.get $x)) (i64.const 0x7fffffff)) (i64.const 3)))
    (local.set $f (f32.sqrt (f32.convert_i32_s (i32.popcnt (i32.xor (local.get $x) (i32.clz (local.get $x)))))))
    (global.set $m (i64.sub (global.get $m) (i64.div_s (local.get $y) (i64.const 3))))
    (f64.add
      (f64.promote_f32 (f32.copysign (local.get $f) (f32.const -0.0)))
      (f64.add (f64.convert_i64_s (global.get $m))
        (select (f64.const 1) (f64.const 2) (i32.lt_u (local.get $x) (global.get $g))))))
)`,
	// Multi-value blocks and loops with parameters, sign extension,
	// saturating truncation, bulk memory and reference types.
	"v2": `(module
  (type $two (func (param i32 i32) (result i32 i32)))
  (table $t0 2 funcref)
  (table $t1 2 externref)
  (memory 1)
  (data $d "abcdefgh")
  (elem $e func $swap $swap)
  (func $swap (type $two) (local.get 1) (local.get 0))
  (func (export "multi") (param $n i32) (result i32)
    (i32.const 1) (i32.const 2)
    (loop $l (param i32 i32) (result i32 i32)
      (call $swap)
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n)))
    (block (param i32 i32) (result i32)
      (i32.sub)))
  (func (export "signext") (param i32) (result i64)
    (i64.add
      (i64.extend_i32_s (i32.add (i32.extend8_s (local.get 0)) (i32.extend16_s (local.get 0))))
      (i64.add (i64.extend8_s (i64.extend_i32_u (local.get 0)))
        (i64.add (i64.extend16_s (i64.extend_i32_u (local.get 0))) (i64.extend32_s (i64.extend_i32_u (local.get 0)))))))
  (func (export "sat") (param f64) (result i64)
    (i64.add
      (i64.extend_i32_u (i32.add (i32.trunc_sat_f64_s (local.get 0)) (i32.trunc_sat_f64_u (local.get 0))))
      (i64.add (i64.trunc_sat_f64_s (local.get 0))
        (i64.add (i64.trunc_sat_f32_u (f32.demote_f64 (local.get 0))) (i64.extend_i32_u (i32.trunc_sat_f32_s (f32.demote_f64 (local.get 0))))))))
  (func (export "bulk") (result i32)
    (memory.init $d (i32.const 100) (i32.const 0) (i32.const 8))
    (data.drop $d)
    (memory.copy (i32.const 200) (i32.const 100) (i32.const 8))
    (memory.fill (i32.const 204) (i32.const 0x5a) (i32.const 2))
    (table.init $t0 $e (i32.const 0) (i32.const 0) (i32.const 2))
    (elem.drop $e)
    (table.copy $t0 $t0 (i32.const 1) (i32.const 0) (i32.const 1))
    (i32.load (i32.const 202)))
  (func (export "refs") (param externref) (result i32)
    (local $i i32)
    (drop (table.grow $t1 (ref.null extern) (i32.const 3)))
    (table.set $t1 (i32.const 1) (local.get 0))
    (table.fill $t1 (i32.const 2) (local.get 0) (i32.const 2))
    (loop $l
      (local.set $i (i32.add (local.get $i) (ref.is_null (table.get $t1 (local.get $i)))))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 1))))
    (i32.add (i32.add (local.get $i) (table.size $t1))
      (i32.add (ref.is_null (ref.func $swap))
        (select (result i32) (i32.const 10) (i32.const 20) (ref.is_null (local.get 0))))))
)`,
	"simd": `(module
  (memory 1)
  (func (export "simd") (param $a i32) (result i32)
    (local $v v128)
    (v128.store (local.get $a) (v128.const i32x4 1 2 3 4))
    (local.set $v (v128.load offset=0 (local.get $a)))
    (local.set $v (i32x4.add (local.get $v) (v128.load32_splat (local.get $a))))
    (local.set $v (i8x16.shuffle 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 31 (local.get $v) (v128.load8x8_s (local.get $a))))
    (local.set $v (i32x4.replace_lane 3 (local.get $v) (i8x16.extract_lane_u 15 (local.get $v))))
    (local.set $v (v128.load8_lane 2 (local.get $a) (local.get $v)))
    (v128.store64_lane offset=16 1 (local.get $a) (local.get $v))
    (local.set $v (f64x2.mul (v128.load64_zero (local.get $a)) (f64x2.splat (f64.const 2))))
    (loop $l
      (local.set $v (i8x16.popcnt (local.get $v)))
      (br_if $l (i32.eqz (v128.any_true (local.get $v)))))
    (i32.add (i32x4.extract_lane 0 (local.get $v)) (i32.load offset=16 (local.get $a))))
)`,
	"tailcall": `(module
  (type $un (func (param i32) (result i32)))
  (memory 1)
  (table 1 funcref)
  (elem (i32.const 0) $down)
  (func $down (export "down") (param i32) (result i32)
    (if (result i32) (i32.eqz (local.get 0))
      (then (i32.const 5))
      (else (return_call $down (i32.sub (local.get 0) (i32.const 1))))))
  (func (export "via") (param i32) (result i32)
    (return_call_indirect (type $un) (local.get 0) (i32.const 0)))
  (func (export "ever") (param i32) (result i32)
    (return_call $down (i32.or (local.get 0) (i32.const 1))))
)`,
	"exceptions": `(module
  (memory 1)
  (tag $e (param i32))
  (func $thrower (param i32) (throw $e (local.get 0)))
  (func (export "t") (param i32) (result i32)
    (try (result i32)
      (do (call $thrower (local.get 0)) (i32.const 0))
      (catch $e (i32.add (i32.const 1)))
      (catch_all (i32.const 7))))
  (func (export "d") (result i32)
    (try (result i32)
      (do (try (result i32) (do (call $thrower (i32.const 3)) (i32.const 1)) (delegate 0)))
      (catch $e)))
  (func (export "r") (result i32)
    (try (result i32)
      (do (try (do (call $thrower (i32.const 4))) (catch $e (drop) (rethrow 0))) (i32.const 0))
      (catch $e)))
)`,
	"threads": `(module
  (memory 1 1 shared)
  (func (export "atomics") (param $a i32) (result i32)
    (i32.atomic.store (local.get $a) (i32.const 5))
    (drop (i32.atomic.rmw.add (local.get $a) (i32.const 2)))
    (drop (i64.atomic.rmw32.cmpxchg_u offset=8 (local.get $a) (i64.const 0) (i64.const 9)))
    (atomic.fence)
    (drop (memory.atomic.notify (local.get $a) (i32.const 0)))
    (drop (memory.atomic.wait32 offset=4 (local.get $a) (i32.const 1) (i64.const 0)))
    (i32.add (i32.atomic.load (local.get $a)) (i32.atomic.load8_u offset=8 (local.get $a))))
)`,
}

// features are the wazero features each corpus module needs.
// (wazero has no legacy exception handling: wabt alone checks that module).
var features = map[string]api.CoreFeatures{
	"tailcall": api.CoreFeaturesV2 | experimental.CoreFeaturesTailCall,
	"threads":  api.CoreFeaturesV2 | experimental.CoreFeaturesThreads,
}

func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: run scripts/setup.sh (it installs wabt)", name)
	}
	return p
}

// wasmTool runs a wabt tool on the module b.
func wasmTool(t testing.TB, name string, b []byte, args ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "m.wasm")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if name != "wasm-objdump" {
		args = append([]string{"--enable-all"}, args...)
	}
	out, err := exec.Command(tool(t, name), append(args, f)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return string(out)
}

func instrument(t testing.TB, wasm []byte) *Result {
	t.Helper()
	res, err := Instrument(wasm)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Instrument(wasm)
	if err != nil || string(again.Wasm) != string(res.Wasm) {
		t.Fatal("the rewrite is not deterministic")
	}
	return res
}

// The text of the inserted checks, line by line, as wasm2wat prints them
// (comments removed). B, L and S are the budget global, the counter local
// and the slow path function; W a weight.
var checkTemplates = map[string][]string{
	"entry": {`global\.get B`, `i32\.const \d+`, `i32\.sub`, `global\.set B`, `global\.get B`, `i32\.const 0`, `i32\.ge_s`, `if`, `else`, `call S`, `end`},
	"loop":  {`local\.get L`, `i32\.const \d+`, `i32\.add`, `local\.tee L`, `i32\.const 65536`, `i32\.le_u`, `if`, `else`, `i32\.const 0`, `local\.set L`, `call S`, `end`},
	// A loop without parameters: the slow path checks the header again.
	"loop-reenter": {`local\.get L`, `i32\.const \d+`, `i32\.add`, `local\.tee L`, `i32\.const 65536`, `i32\.le_u`, `if`, `else`, `i32\.const 0`, `local\.set L`, `call S`, `br 1`, `end`},
	"exit": {`global\.get B`, `local\.get L`, `i32\.sub`, `global\.set B`, `i32\.const 0`, `local\.set L`,
		`global\.get B`, `i32\.const 0`, `i32\.ge_s`, `if`, `else`, `call S`, `end`},
	"call":   {`global\.get STOP`, `i32\.eqz`, `if`, `else`, `unreachable`, `end`},
	"charge": {`global\.get B`, `local\.get \d+`, `i32\.const 8`, `i32\.shr_u`, `i32\.sub`, `global\.set B`, `global\.get B`, `i32\.const 0`, `i32\.ge_s`, `if`, `else`, `call S`, `end`},
	"exit-weighted": {`global\.get B`, `local\.get L`, `i32\.sub`, `i32\.const \d+`, `i32\.sub`, `global\.set B`, `i32\.const 0`, `local\.set L`,
		`global\.get B`, `i32\.const 0`, `i32\.ge_s`, `if`, `else`, `call S`, `end`},
}

var (
	teeLine  = regexp.MustCompile(`^local\.tee (\d+)$`)
	bulkLine = regexp.MustCompile(`^(memory\.(fill|copy|init)|table\.(fill|copy|init))\b`)
)

var exitInstr = regexp.MustCompile(`^(return|br|br_if|br_table|return_call|return_call_indirect)\b`)

var watComment = regexp.MustCompile(`\s*\(;[^;]*;\)|\s*;;.*$`)

// watFuncs splits wasm2wat's text into the lines of each function (their
// instructions only) and the other lines of the module, comments removed.
func watFuncs(text string) (funcs [][]string, other []string) {
	var cur []string
	in := false
	flush := func() {
		if in {
			if n := len(cur); n > 0 {
				cur[n-1] = strings.TrimSuffix(cur[n-1], ")")
			}
			funcs = append(funcs, cur)
		}
		cur, in = nil, false
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "  (") {
			flush()
			if strings.HasPrefix(line, "  (func ") {
				in = true
				if !strings.HasSuffix(line, ")") || strings.Count(line, "(") != strings.Count(line, ")") {
					continue // instructions follow
				}
				cur = nil // an empty body
				continue
			}
		}
		line = strings.TrimSpace(watComment.ReplaceAllString(line, ""))
		if line == "" {
			continue
		}
		if in {
			if !strings.HasPrefix(line, "(local") {
				cur = append(cur, line)
			}
			continue
		}
		other = append(other, line)
	}
	flush()
	return funcs, other
}

// stripChecks removes the inserted checks from the lines of a function and
// counts them by kind. It also checks where each kind goes.
func stripChecks(t *testing.T, lines []string, res *Result, counts map[string]int) []string {
	t.Helper()
	var out []string
	templates := map[string][]*regexp.Regexp{}
	for kind, tmpl := range checkTemplates {
		for _, l := range tmpl {
			l = strings.ReplaceAll(l, "STOP", fmt.Sprint(res.Stop))
			l = strings.ReplaceAll(l, "B", fmt.Sprint(res.Budget))
			l = strings.ReplaceAll(l, "S", fmt.Sprint(res.Slow))
			l = strings.ReplaceAll(l, "L", `\d+`)
			templates[kind] = append(templates[kind], regexp.MustCompile("^"+l+"$"))
		}
	}
	matches := func(at int, tmpl []*regexp.Regexp) bool {
		if at+len(tmpl) > len(lines) {
			return false
		}
		for j, re := range tmpl {
			if !re.MatchString(lines[at+j]) {
				return false
			}
		}
		return true
	}
next:
	for i := 0; i < len(lines); {
		// A bulk instruction: its size saved in a local, then charged.
		if m := teeLine.FindStringSubmatch(lines[i]); m != nil && i+1 < len(lines) && bulkLine.MatchString(lines[i+1]) &&
			matches(i+2, templates["charge"]) && lines[i+3] == "local.get "+m[1] {
			out = append(out, lines[i+1])
			counts["bulk"]++
			i += 2 + len(templates["charge"])
			continue
		}
		for _, kind := range []string{"exit-weighted", "exit", "entry", "loop-reenter", "loop", "call"} {
			if !matches(i, templates[kind]) {
				continue
			}
			switch kind {
			case "entry":
				if i != 0 {
					t.Errorf("entry check at line %d of a function", i)
				}
			case "loop", "loop-reenter":
				if len(out) == 0 || !strings.HasPrefix(out[len(out)-1], "loop") {
					t.Errorf("loop check after %q", out[len(out)-1:])
				} else if params := strings.Contains(out[len(out)-1], "(param"); params == (kind == "loop-reenter") {
					// A branch to a loop with parameters would have to
					// pass them.
					t.Errorf("%s check after %q", kind, out[len(out)-1])
				}
			case "call":
				if len(out) == 0 || !strings.HasPrefix(out[len(out)-1], "call") {
					t.Errorf("call check after %q", out[len(out)-1:])
				}
			default:
				// Exits come before what leaves the function, or last.
				n := i + len(templates[kind])
				if n < len(lines) && !exitInstr.MatchString(lines[n]) {
					t.Errorf("exit check before %q", lines[n])
				}
			}
			i += len(templates[kind])
			switch kind {
			case "exit-weighted":
				kind = "exit"
			case "loop-reenter":
				counts["reenter"]++
				kind = "loop"
			}
			counts[kind]++
			continue next
		}
		out = append(out, lines[i])
		i++
	}
	return out
}

// checkRoundTrip checks that the instrumented module is the original one
// plus the checks and the additions, instruction for instruction, as wabt
// reads both, and that wabt validates it.
func checkRoundTrip(t *testing.T, orig []byte, res *Result) {
	t.Helper()
	wasmTool(t, "wasm-validate", res.Wasm)
	// Joined data segments are compared by what they write, and the rest
	// without them.
	checkData(t, orig, res)
	ow, iw := orig, res.Wasm
	if res.DataJoined > 0 {
		ow, iw = withoutData(t, orig), withoutData(t, res.Wasm)
	}
	of, oo := watFuncs(wasmTool(t, "wasm2wat", ow))
	inf, io := watFuncs(wasmTool(t, "wasm2wat", iw))
	if len(inf) != len(of)+1 {
		t.Fatalf("%d functions instrumented, %d before", len(inf), len(of))
	}
	counts := map[string]int{}
	for i := range of {
		got := stripChecks(t, inf[i], res, counts)
		if !slices.Equal(got, of[i]) {
			t.Errorf("function %d differs once the checks are removed:\n%s\nwant:\n%s", i, strings.Join(got, "\n"), strings.Join(of[i], "\n"))
			break
		}
	}
	if counts["loop"] != res.Loops || counts["entry"] != res.Entries || counts["exit"] != res.Exits ||
		counts["call"] != res.Calls || counts["bulk"] != res.Bulk {
		t.Errorf("found %v checks, Result says %d loops, %d entries, %d exits, %d calls, %d bulk", counts,
			res.Loops, res.Entries, res.Exits, res.Calls, res.Bulk)
	}
	loops := 0
	for _, f := range of {
		for _, l := range f {
			if strings.HasPrefix(l, "loop") {
				loops++
			}
		}
	}
	if loops != res.Loops {
		t.Errorf("%d loops, %d loop checks", loops, res.Loops)
	}
	// The module's other lines: the original's minus its start function,
	// plus the slow path's type, the two globals and the exports (of the
	// stop flag, the start function and the mutable globals).
	var want []string
	for _, l := range oo {
		if !strings.HasPrefix(l, "(start ") {
			want = append(want, l)
		}
	}
	// The additions are the last of their kind (comments, which hold the
	// indices, are gone). The last line closes the module.
	got := slices.Clone(io)
	for _, ls := range [][]string{got, want} {
		if n := len(ls); n > 0 {
			ls[n-1] = strings.TrimSuffix(ls[n-1], ")")
		}
	}
	added := []string{"(type (func))", "(global (mut i32) (i32.const 0))", "(global (mut i32) (i32.const 65536))",
		fmt.Sprintf(`(export "%s" (global %d))`, StopExport, res.Stop)}
	if res.Start {
		added = append(added, `(export "`+StartExport+`" (func `)
	}
	for _, g := range res.Globals {
		// wabt names the global when the name section does.
		added = append(added, fmt.Sprintf(`(export "%s" (global `, GlobalExport(g)))
	}
	for _, a := range added {
		k := -1
		for j, l := range got {
			if strings.HasPrefix(l, a) && (l == a || strings.HasSuffix(a, " ")) {
				k = j
			}
		}
		if k < 0 {
			t.Errorf("the instrumented module lacks %q", a)
			continue
		}
		if strings.Contains(a, "65536") && k+1 < len(got) && strings.HasPrefix(got[k+1], "(global") {
			t.Errorf("%q is not the last global", a)
		}
		got = slices.Delete(got, k, k+1)
	}
	if !slices.Equal(got, want) {
		t.Errorf("module lines differ:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRoundTripCorpus(t *testing.T) {
	for name, src := range corpus {
		t.Run(name, func(t *testing.T) {
			orig := testmod.WAT(t, src)
			res := instrument(t, orig)
			if strings.Contains(src, "(loop") && (res.Loops == 0 || res.Exits == 0) {
				t.Errorf("%d loops, %d exits instrumented", res.Loops, res.Exits)
			}
			checkRoundTrip(t, orig, res)
			if f, ok := features[name]; ok || name == "mvp" || name == "v2" || name == "simd" {
				if !ok {
					f = api.CoreFeaturesV2
				}
				rt := wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfig().WithCoreFeatures(f))
				defer rt.Close(context.Background())
				if _, err := rt.CompileModule(context.Background(), res.Wasm); err != nil {
					t.Errorf("wazero refuses the instrumented module: %v", err)
				}
			}
		})
	}
}

// realModules builds the example modules of every guest language.
func realModules(t testing.TB) map[string][]byte {
	t.Helper()
	mods := map[string][]byte{}
	for _, lang := range testmod.Languages {
		for _, name := range []string{"wordcount", "window", "conformance"} {
			p, err := testmod.Build(lang, name)
			if err != nil {
				t.Fatalf("building %s %s: %v", lang, name, err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			mods[lang+"/"+name] = b
		}
	}
	return mods
}

func TestRoundTripRealModules(t *testing.T) {
	rt := wazero.NewRuntime(context.Background())
	defer rt.Close(context.Background())
	for name, orig := range realModules(t) {
		t.Run(name, func(t *testing.T) {
			res := instrument(t, orig)
			t.Logf("%d → %d bytes (+%.1f%%): %d loop, %d entry, %d exit, %d call checks, %d bulk instructions; start section %v; dropped %v; %d mutable globals; not resettable: %q",
				len(orig), len(res.Wasm), 100*float64(len(res.Wasm)-len(orig))/float64(len(orig)),
				res.Loops, res.Entries, res.Exits, res.Calls, res.Bulk, res.Start, res.Dropped, len(res.Globals), res.NoReset)
			if _, err := rt.CompileModule(context.Background(), res.Wasm); err != nil {
				t.Fatalf("wazero refuses the instrumented module: %v", err)
			}
			// wabt takes seconds over a Go module: one is enough.
			if len(orig) < 1<<20 || name == "go/wordcount" {
				checkRoundTrip(t, orig, res)
			}
		})
	}
}

// env is the host module that the mvp corpus module imports.
func env(t testing.TB, rt wazero.Runtime) {
	t.Helper()
	_, err := rt.NewHostModuleBuilder("env").
		NewFunctionBuilder().WithFunc(func(x int32) int32 { return x * 3 }).Export("host").
		Instantiate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The imported global comes from a module of its own.
	_, err = rt.InstantiateWithConfig(context.Background(), testmod.WAT(t, `(module (global (export "g") i32 (i32.const 9)))`),
		wazero.NewModuleConfig().WithName("genv"))
	if err != nil {
		t.Fatal(err)
	}
}

// TestBehaviour runs the corpus modules, instrumented and not, and
// compares the results of their exports.
func TestBehaviour(t *testing.T) {
	calls := []struct {
		module, fn string
		args       []uint64
	}{
		{"mvp", "started", nil},
		{"mvp", "fact", []uint64{10}},
		{"mvp", "sum", []uint64{1000}},
		// Loops past the budget, whose slow paths run with values in
		// locals and on the stack, and go back to the loop's header.
		{"mvp", "sum", []uint64{3*Budget + 7}},
		{"mvp", "deep", []uint64{5 * Budget, api.EncodeF64(0.25)}},
		{"mvp", "indirect", []uint64{1, 100}},
		{"mvp", "indirect", []uint64{2, 6}},
		{"mvp", "host", []uint64{14}},
		{"mvp", "table", []uint64{1}},
		{"mvp", "table", []uint64{2}},
		{"mvp", "table", []uint64{3}},
		{"mvp", "table", []uint64{9}},
		{"mvp", "early", []uint64{5}},
		{"mvp", "memory", []uint64{64}},
		{"mvp", "numbers", []uint64{12345}},
		{"v2", "multi", []uint64{7}},
		// A loop with parameters past the budget: its slow path goes on.
		{"v2", "multi", []uint64{2*Budget + 3}},
		{"v2", "signext", []uint64{0x8180}},
		{"v2", "sat", []uint64{api.EncodeF64(-1e30)}},
		{"v2", "bulk", nil},
		{"v2", "refs", []uint64{0}},
		{"simd", "simd", []uint64{128}},
		{"tailcall", "down", []uint64{100000}},
		{"tailcall", "via", []uint64{10}},
	}
	results := map[bool][]string{}
	for _, instrumented := range []bool{false, true} {
		for _, c := range calls {
			f, ok := features[c.module]
			if !ok {
				f = api.CoreFeaturesV2
			}
			rt := wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfig().WithCoreFeatures(f))
			env(t, rt)
			wasm := testmod.WAT(t, corpus[c.module])
			if instrumented {
				wasm = instrument(t, wasm).Wasm
			}
			mod, err := rt.InstantiateWithConfig(context.Background(), wasm, wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatal(err)
			}
			if instrumented && c.module == "mvp" {
				// The start section became an export.
				if _, err := mod.ExportedFunction(StartExport).Call(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			out, err := mod.ExportedFunction(c.fn).Call(context.Background(), c.args...)
			results[instrumented] = append(results[instrumented], fmt.Sprintf("%s.%s%v = %v %v", c.module, c.fn, c.args, out, err))
			_ = rt.Close(context.Background())
		}
	}
	if !slices.Equal(results[false], results[true]) {
		t.Errorf("instrumented:\n%s\nwant:\n%s", strings.Join(results[true], "\n"), strings.Join(results[false], "\n"))
	}
	t.Logf("%s", strings.Join(results[true], "\n"))
}

// spinWAT has the shapes of code that run for ever or long: a loop, loops
// nested in calls that each stay under the budget, a loop-free exponential
// call tree, and a tail-call loop; and a counting loop to watch the budget.
const spinWAT = `(module
  (memory 1)
  (func (export "spin") (param $n i32)
    (loop $l
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n))))
  (func (export "forever") (loop $l (br $l)))
  (func (export "fill") (param $n i32) (memory.fill (i32.const 0) (i32.const 0) (local.get $n)))
  (func $inner (param $n i32)
    (loop $l
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n))))
  (func $middle (local $i i32)
    (loop $l
      (call $inner (i32.const 60000))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 60000)))))
  (func (export "nested") (loop $l (call $middle) (br $l)))
  (func (export "fills") (loop $l (memory.fill (i32.const 0) (i32.const 0) (i32.const 65536)) (br $l)))
  (func $tree (param $d i32)
    (if (local.get $d) (then
      (call $tree (i32.sub (local.get $d) (i32.const 1)))
      (call $tree (i32.sub (local.get $d) (i32.const 1))))))
  (func (export "tree") (call $tree (i32.const 60)))
  (func $tail (param i32) (return_call $tail (i32.add (local.get 0) (i32.const 1))))
  (func (export "tail") (call $tail (i32.const 0)))
)`

func spinModule(t *testing.T) (api.Module, *Result) {
	t.Helper()
	rt := wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2|experimental.CoreFeaturesTailCall))
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	res := instrument(t, testmod.WAT(t, spinWAT))
	mod, err := rt.InstantiateWithConfig(context.Background(), res.Wasm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	return mod, res
}

func TestBudget(t *testing.T) {
	mod, res := spinModule(t)
	budget := mod.(experimental.InternalModule).Global(int(res.Budget))
	spin := mod.ExportedFunction("spin")
	for _, step := range []struct {
		n    uint64
		want uint64
	}{
		{1000, Budget - 1000}, // 1000 loop iterations charged on return
		{Budget - 1000, 0},    // down to 0: not yet exhausted
		{1, Budget},           // exhausted: the slow path refilled it
		// The slow path ran inside the loop, then went back to the
		// loop's header, which charged the iteration again (1).
		{Budget + 1, Budget - 1},
		// Three times inside (counter reset to 0 each time, and the
		// iteration charged again); the last 2+3 charged on return.
		{3*Budget + 5, Budget - 5},
	} {
		if _, err := spin.Call(context.Background(), step.n); err != nil {
			t.Fatal(err)
		}
		if got := budget.Get(); got != step.want {
			t.Errorf("after spin(%d): budget %d, want %d", step.n, got, step.want)
		}
	}
	// A bulk instruction is charged a unit per 256 bytes.
	if _, err := mod.ExportedFunction("fill").Call(context.Background(), 10*256+255); err != nil {
		t.Fatal(err)
	}
	if got := budget.Get(); got != Budget-5-10 {
		t.Errorf("after filling 2815 bytes: budget %d, want %d", got, Budget-5-10)
	}
}

// TestStop stops every shape of spinSrc by setting the flag from another
// goroutine, and shows that a spinning guest lets the garbage collector
// stop the world.
func TestStop(t *testing.T) {
	for _, fn := range []string{"forever", "nested", "tree", "tail", "fills"} {
		t.Run(fn, func(t *testing.T) {
			mod, _ := spinModule(t)
			errc := make(chan error, 1)
			go func() {
				_, err := mod.ExportedFunction(fn).Call(context.Background())
				errc <- err
			}()
			// Collections stop the world: each needs the guest to reach
			// a slow path.
			gc := make(chan struct{})
			go func() {
				for range 3 {
					runtime.GC()
				}
				close(gc)
			}()
			select {
			case <-gc:
			case err := <-errc:
				t.Fatalf("%s returned: %v", fn, err)
			case <-time.After(30 * time.Second):
				t.Fatal("the garbage collector could not stop the world within 30s")
			}
			mod.ExportedGlobal(StopExport).(api.MutableGlobal).Set(1)
			select {
			case err := <-errc:
				if err == nil || !strings.Contains(err.Error(), "unreachable") {
					t.Errorf("got %v, want a trap", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("setting the flag did not stop the guest within 30s")
			}
		})
	}
}

// TestSmallBulk: a bulk instruction whose size an i32.const just pushed,
// under a unit's worth, is not charged; any other is.
func TestSmallBulk(t *testing.T) {
	res := instrument(t, testmod.WAT(t, `(module
  (memory 1)
  (table 300 funcref)
  (func (export "f") (param $n i32)
    (memory.copy (i32.const 0) (i32.const 64) (i32.const 255)) ;; free
    (memory.fill (i32.const 0) (i32.const 0) (i32.const 0))    ;; free
    (table.fill 0 (i32.const 0) (ref.null func) (i32.const 9)) ;; free
    (memory.fill (i32.const 0) (i32.const 0) (i32.const 256))  ;; a unit
    (memory.copy (i32.const 0) (i32.const 64) (i32.const -1))  ;; 2^32-1 bytes
    (memory.fill (i32.const 0) (i32.const 0) (local.get $n))
    (memory.fill (i32.const 0) (i32.const 0) (block (result i32) (i32.const 1))) ;; not just pushed
    (table.copy 0 0 (i32.const 0) (i32.const 1) (i32.add (i32.const 1) (i32.const 1)))))`))
	if res.Bulk != 5 {
		t.Errorf("%d bulk instructions charged, want 5", res.Bulk)
	}
}

func TestRefuses(t *testing.T) {
	mvp := testmod.WAT(t, corpus["mvp"])
	exporting := testmod.WAT(t, `(module (memory 1) (func (export "wstream:stop")))`)
	gc := []byte("\x00asm\x01\x00\x00\x00\x01\x03\x01\x4e\x00") // an empty recursion group
	const mem = "\x05\x03\x01\x00\x01"
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"empty", nil, "not a WebAssembly module"},
		{"version 2", []byte("\x00asm\x02\x00\x00\x00"), "unsupported binary version"},
		{"truncated", mvp[:len(mvp)/2], "overruns the module"},
		{"unknown section", []byte("\x00asm\x01\x00\x00\x00\x0e\x00"), "unknown section id 14"},
		{"sections out of order", []byte("\x00asm\x01\x00\x00\x00\x03\x01\x00\x01\x01\x00"), "out of order"},
		{"repeated section", []byte("\x00asm\x01\x00\x00\x00\x01\x01\x00\x01\x01\x00"), "out of order or repeated"},
		{"name taken", exporting, `already exports "wstream:stop"`},
		{"GC types", gc, "not a function type"},
		{"no memory", testmod.WAT(t, `(module (func))`), "no memory"},
		{"code without functions", []byte("\x00asm\x01\x00\x00\x00" + mem + "\x0a\x01\x00"), ""},
		{"functions without code", []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00" + mem), "without a code section"},
	} {
		_, err := Instrument(tc.wasm)
		var ie *Error
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an *Error with %q", tc.name, err, tc.want)
		}
	}
}

// TestDropsOffsets: custom sections that hold code offsets go, the others
// stay, and the name section still names the functions.
func TestDropsOffsets(t *testing.T) {
	orig := testmod.WAT(t, `(module (memory 1) (func $named (export "f") (loop $l (br $l))))`)
	custom := func(name, payload string) []byte {
		b := appendName(nil, name)
		b = append(b, payload...)
		return append(appendU32([]byte{0}, uint32(len(b))), b...)
	}
	for _, s := range []string{".debug_info", ".debug_line", "sourceMappingURL", "metadata.code.branch_hint", "producers", "wstream.plan"} {
		orig = append(orig, custom(s, "xyz")...)
	}
	// Function 0 is "named" (wat2wasm writes no names by default).
	orig = append(orig, custom("name", "\x01\x08\x01\x00\x05named")...)
	res := instrument(t, orig)
	if want := []string{".debug_info", ".debug_line", "sourceMappingURL", "metadata.code.branch_hint"}; !slices.Equal(res.Dropped, want) {
		t.Errorf("dropped %v, want %v", res.Dropped, want)
	}
	text := wasmTool(t, "wasm-objdump", res.Wasm, "-h")
	for _, s := range []string{`"producers"`, `"wstream.plan"`, `"name"`} {
		if !strings.Contains(text, s) {
			t.Errorf("section %s is gone:\n%s", s, text)
		}
	}
	if dis := wasmTool(t, "wasm2wat", res.Wasm); !strings.Contains(dis, "(func $named") {
		t.Errorf("the function lost its name:\n%s", dis)
	}
}

// BenchmarkInstrument measures the rewrite of a Go module, the largest the
// examples have, which Compile pays once per module before wazero compiles
// it.
func BenchmarkInstrument(b *testing.B) {
	p, err := testmod.Build("go", "wordcount")
	if err != nil {
		b.Fatal(err)
	}
	wasm, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(wasm)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Instrument(wasm); err != nil {
			b.Fatal(err)
		}
	}
}

// TestResettable: the mutable globals a module defines are exported, the
// stop flag's aside, and what keeps an instance from being reset is named.
func TestResettable(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		globals   []uint32 // without the budget
		noReset   string
	}{
		{"globals", `(module (import "g" "c" (global i32)) (memory 1)
  (global $a (mut i32) (i32.const 1)) (global $k i64 (i64.const 2))
  (global $b (mut i64) (i64.add (i64.const 3) (i64.const 4))) (global $r (mut funcref) (ref.null func))
  (func (export "f") (global.set $a (i32.const 5))))`, []uint32{1, 3, 4}, ""},
		{"no globals", `(module (memory 1) (table 1 funcref) (func $f) (elem (i32.const 0) $f)
  (func (export "f") (call_indirect (i32.const 0))))`, []uint32{}, ""},
		{"imported mutable global", `(module (import "g" "m" (global (mut i32))) (memory 1))`, nil, "imports a mutable global"},
		{"imported memory", `(module (import "g" "mem" (memory 1)))`, nil, "imports a memory"},
		{"imported table", `(module (import "g" "t" (table 1 funcref)) (memory 1))`, nil, "imports a table"},
		{"mutable v128", `(module (memory 1) (global (mut v128) (v128.const i64x2 0 0)))`, nil, "global 0 is a mutable v128"},
		{"table.set", `(module (memory 1) (table 1 funcref) (func (table.set 0 (i32.const 0) (ref.null func))))`, []uint32{}, "function 0 uses table.set"},
		{"table.grow", `(module (memory 1) (table 1 funcref) (func (drop (table.grow 0 (ref.null func) (i32.const 1)))))`, []uint32{}, "uses table.grow"},
		{"table.fill", `(module (memory 1) (table 1 funcref) (func (table.fill 0 (i32.const 0) (ref.null func) (i32.const 1))))`, []uint32{}, "uses table.fill"},
		{"table.copy", `(module (memory 1) (table 2 funcref) (func (table.copy (i32.const 0) (i32.const 1) (i32.const 1))))`, []uint32{}, "uses table.copy"},
		{"table.init", `(module (memory 1) (table 1 funcref) (func $f) (elem func $f) (func (table.init 0 (i32.const 0) (i32.const 0) (i32.const 1))))`, []uint32{}, "uses table.init"},
		{"elem.drop", `(module (memory 1) (func $f) (elem func $f) (func (elem.drop 0)))`, []uint32{}, "uses elem.drop"},
		{"data.drop", `(module (memory 1) (data "x") (func (data.drop 0)))`, []uint32{}, "uses data.drop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := instrument(t, testmod.WAT(t, tc.src))
			if !strings.Contains(res.NoReset, tc.noReset) || (tc.noReset == "") != (res.NoReset == "") {
				t.Errorf("NoReset %q, want %q", res.NoReset, tc.noReset)
			}
			want := tc.globals
			if want != nil {
				want = append(want, res.Budget)
			}
			if !slices.Equal(res.Globals, want) {
				t.Errorf("Globals %v, want %v", res.Globals, want)
			}
			if slices.Contains(res.Globals, res.Stop) {
				t.Errorf("the stop flag %d is among the exported globals %v", res.Stop, res.Globals)
			}
		})
	}
	// Through wazero: each export is the global it names, and mutable.
	rt := wazero.NewRuntime(context.Background())
	defer rt.Close(context.Background())
	res := instrument(t, testmod.WAT(t, `(module (memory 1) (global $a (mut i32) (i32.const 7)) (global $b (mut i64) (i64.const -3))
  (func (export "get") (result i64) (i64.add (i64.extend_i32_u (global.get $a)) (global.get $b))))`))
	mod, err := rt.InstantiateWithConfig(context.Background(), res.Wasm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range res.Globals {
		mg, ok := mod.ExportedGlobal(GlobalExport(g)).(api.MutableGlobal)
		if !ok {
			t.Fatalf("%s is not a mutable global", GlobalExport(g))
		}
		if got, want := mg.Get(), mod.(experimental.InternalModule).Global(int(g)).Get(); got != want {
			t.Errorf("%s = %d, global %d = %d", GlobalExport(g), got, g, want)
		}
	}
	mod.ExportedGlobal(GlobalExport(0)).(api.MutableGlobal).Set(100)
	mod.ExportedGlobal(GlobalExport(1)).(api.MutableGlobal).Set(uint64(1000))
	if out, err := mod.ExportedFunction("get").Call(context.Background()); err != nil || out[0] != 1100 {
		t.Errorf("get() = %v, %v after setting the globals, want 1100", out, err)
	}
	if _, err := Instrument(testmod.WAT(t, `(module (memory 1) (global (export "wstream:global:0") i32 (i32.const 0)))`)); err == nil ||
		!strings.Contains(err.Error(), "reserves") {
		t.Errorf("a module exporting a reserved name: got %v", err)
	}
}
