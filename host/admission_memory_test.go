package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/host/instrument"
)

// Modules at the default admission limits, built byte by byte: the worst
// a tenant can make a worker compile.

func uleb(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func wsection(m []byte, id byte, payload []byte) []byte {
	return append(uleb(append(m, id), uint64(len(payload))), payload...)
}

// worstModule is a module with a memory and n functions of type () -> ()
// whose bodies are body(i), plus extra sections (id, payload) placed in
// order around them.
func worstModule(n int, body func(i int) []byte, tables, elems []byte) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = wsection(m, 1, []byte{1, 0x60, 0, 0})
	funcs := uleb(nil, uint64(n))
	funcs = append(funcs, bytes.Repeat([]byte{0}, n)...)
	m = wsection(m, 3, funcs)
	if tables != nil {
		m = wsection(m, 4, tables)
	}
	m = wsection(m, 5, []byte{1, 0, 1})
	if elems != nil {
		m = wsection(m, 9, elems)
	}
	code := uleb(nil, uint64(n))
	for i := range n {
		b := body(i)
		code = append(uleb(code, uint64(len(b))), b...)
	}
	return wsection(m, 10, code)
}

var worstModules = []struct {
	name string
	wasm func() []byte
}{
	{"locals: 41 functions of 50,000 locals", func() []byte {
		l := instrument.DefaultLimits
		n := int(l.Locals / uint64(l.LocalsPerFunction))
		return worstModule(n, func(int) []byte { return append(uleb([]byte{1}, uint64(l.LocalsPerFunction)), 0x7f, 0x0b) }, nil, nil)
	}},
	{"code: functions of 1 MiB of i32.const; drop", func() []byte {
		l := instrument.DefaultLimits
		per := int(l.FunctionBytes) - 8
		n := int(l.CodeBytes)/int(l.FunctionBytes) - 1
		return worstModule(n, func(int) []byte {
			b := []byte{0}
			b = append(b, bytes.Repeat([]byte{0x41, 0x00, 0x1a}, per/3)...)
			return append(b, 0x0b)
		}, nil, nil)
	}},
	{"functions: 131,072 empty ones", func() []byte {
		return worstModule(int(instrument.DefaultLimits.Functions), func(int) []byte { return []byte{0, 0x0b} }, nil, nil)
	}},
	{"phis: 2,048 locals set inside 1,023 nested loops (LocalBlocks)", func() []byte {
		return worstModule(1, func(int) []byte { return nestedUse(2048, 1023) }, nil, nil)
	}},
	{"loops: 2,896 nested loops (BlockPairs)", func() []byte {
		return worstModule(1, func(int) []byte { return nestedUse(1, 2896) }, nil, nil)
	}},
	{"elements: a table of 262,144 filled by a segment", func() []byte {
		n := instrument.DefaultLimits.TableElements
		tables := uleb([]byte{1, 0x70, 0x00}, uint64(n))
		elems := uleb([]byte{1, 0x00, 0x41, 0x00, 0x0b}, uint64(n))
		elems = append(elems, bytes.Repeat([]byte{0}, int(n))...)
		return worstModule(1, func(int) []byte { return []byte{0, 0x0b} }, tables, elems)
	}},
}

// nestedUse is a body declaring locals i64 locals and setting each of them
// inside depth nested loops that run once.
func nestedUse(locals, depth int) []byte {
	b := append(uleb([]byte{1}, uint64(locals)), 0x7e)
	b = append(b, bytes.Repeat([]byte{0x03, 0x40}, depth)...)
	for i := range locals {
		b = append(b, 0x42, 0x01, 0x21)
		b = uleb(b, uint64(i))
	}
	// Each loop branches back to its header (never, at run time): a
	// header with two predecessors takes a phi per local set inside.
	b = append(b, bytes.Repeat([]byte{0x41, 0x00, 0x0d, 0x00, 0x0b}, depth)...)
	return append(b, 0x0b)
}

var hwmLine = regexp.MustCompile(`(?m)^(VmHWM|VmRSS):\s+(\d+) kB$`)

// procMemory returns the process's peak and current resident sets, KiB.
func procMemory(t *testing.T) (hwm, rss int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, m := range hwmLine.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseInt(m[2], 10, 64)
		if m[1] == "VmHWM" {
			hwm = v
		} else {
			rss = v
		}
	}
	return hwm, rss
}

// TestAdmissionCompileMemory measures the resident set that compiling
// each worst module takes, as a tenant's: abi/ABI.md ("Limits") gives the
// figures. It takes minutes of CPU; WSTREAM_COMPILE_MEMORY=1 runs it.
func TestAdmissionCompileMemory(t *testing.T) {
	if os.Getenv("WSTREAM_COMPILE_MEMORY") == "" {
		t.Skip("WSTREAM_COMPILE_MEMORY=1 runs it")
	}
	for _, c := range worstModules {
		if only := os.Getenv("WSTREAM_COMPILE_MEMORY"); only != "1" && !strings.Contains(c.name, only) {
			continue
		}
		wasm := c.wasm()
		if err := instrument.Admit(wasm, instrument.Limits{}); err != nil {
			t.Fatalf("%s: not within the limits: %v", c.name, err)
		}
		r := newTestRuntime(t, Config{})
		runtime.GC()
		debug.FreeOSMemory()
		// Resets the peak resident set (VmHWM) to the current one.
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			t.Skip(err)
		}
		_, before := procMemory(t)
		start := time.Now()
		_, err := r.Compile(context.Background(), "worst.wasm", wasm, TenantModule())
		took := time.Since(start)
		peak, after := procMemory(t)
		// The module exports nothing the ABI requires: it fails
		// validation after compiling, which is what is measured.
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: got %v, want a validation error after compiling", c.name, err)
		}
		t.Logf("%s: %d KiB, %v to compile; resident set %d MiB before, %d MiB at most, %d MiB after",
			c.name, len(wasm)>>10, took.Round(time.Millisecond), before>>10, peak>>10, after>>10)
		_ = r.Close(context.Background())
	}
}
