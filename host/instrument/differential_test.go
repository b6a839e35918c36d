package instrument

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// progGen builds a valid module from fuzz bytes, by construction: up to
// four functions (i32, i32) -> i32 made of arithmetic that may trap
// (division, remainder), loads and stores that may fall outside memory,
// conditional traps, early returns, a mutable global, bounded loops (at
// most 63 iterations, nested twice) and calls to later functions (a call
// graph without cycles, three call sites a function, none inside a loop),
// so every call of every function ends. It exports function 0 as "f0",
// the memory as "mem", the global as "g", and "spin", which calls f0 for
// ever.
type progGen struct {
	data  []byte
	pos   int
	nf    int
	cur   int // the function being generated
	calls int // call sites in it so far
	loops int // loops open around the expression being generated
	b     []byte
}

const (
	genLocals = 3 // i32 locals after the two parameters: 2 and 3 count loops, 4 is scratch
	genMaxDep = 7
)

func (g *progGen) next() byte {
	if g.pos >= len(g.data) {
		return 0
	}
	c := g.data[g.pos]
	g.pos++
	return c
}

func (g *progGen) op(b ...byte) { g.b = append(g.b, b...) }

func (g *progGen) i32(v int32) { g.b = appendS32(append(g.b, 0x41), v) }

// binops are the i32 binary operators generated: arithmetic (division and
// remainder trap), bitwise, shifts, comparisons.
var binops = []byte{0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x46, 0x48, 0x4b}

// expr appends code that pushes one i32.
func (g *progGen) expr(depth int) {
	c := g.next()
	if depth >= genMaxDep || g.pos >= len(g.data) {
		c %= 2
	}
	switch c % 13 {
	case 0:
		v := int32(g.next()) | int32(g.next())<<8
		if g.next()&1 == 1 {
			v = -v
		}
		g.i32(v)
	case 1:
		g.op(0x20, g.next()%(2+genLocals)) // local.get
	case 2, 3:
		g.expr(depth + 1)
		g.expr(depth + 1)
		g.op(binops[int(g.next())%len(binops)])
	case 4: // if with results
		g.expr(depth + 1)
		g.op(0x04, 0x7f)
		g.expr(depth + 1)
		g.op(0x05)
		g.expr(depth + 1)
		g.op(0x0b)
	case 5: // a call to a later function
		if g.cur+1 >= g.nf || g.loops > 0 || g.calls >= 3 {
			g.i32(int32(g.next()))
			return
		}
		g.calls++
		callee := g.cur + 1 + int(g.next())%(g.nf-g.cur-1)
		g.expr(depth + 1)
		g.expr(depth + 1)
		g.op(0x10, byte(callee))
	case 6: // load, masked into memory or not
		g.expr(depth + 1)
		if g.next()%4 != 0 {
			g.i32(0xfffc)
			g.op(0x71)
		}
		g.op(0x28, 0x02, 0x00)
	case 7: // store, then the value stored
		g.expr(depth + 1)
		g.i32(0xfffc)
		g.op(0x71)
		g.expr(depth + 1)
		g.op(0x22, 4, 0x36, 0x02, 0x00, 0x20, 4) // local.tee 4; i32.store; local.get 4
	case 8: // a loop of at most 63 iterations, summing its body in local 4
		if g.loops >= 2 {
			g.op(0x20, 4)
			return
		}
		counter := byte(2 + g.loops)
		g.expr(depth + 1)
		g.i32(63)
		g.op(0x71, 0x21, counter)             // i32.and; local.set counter
		g.op(0x02, 0x40, 0x03, 0x40)          // block loop
		g.op(0x20, counter, 0x45, 0x0d, 0x01) // local.get; i32.eqz; br_if 1
		g.op(0x20, counter, 0x41, 0x01, 0x6b) // local.get; i32.const 1; i32.sub
		g.op(0x21, counter)                   // local.set
		g.loops++
		g.expr(depth + 1)
		g.loops--
		g.op(0x20, 4, 0x6a, 0x21, 4)          // local.get 4; i32.add; local.set 4
		g.op(0x0c, 0x00, 0x0b, 0x0b, 0x20, 4) // br 0; end; end; local.get 4
	case 9: // a trap when a value is 0
		g.expr(depth + 1)
		g.op(0x04, 0x7f)
		g.i32(int32(g.next()))
		g.op(0x05, 0x00, 0x0b) // else unreachable end
	case 10: // the global
		g.expr(depth + 1)
		g.op(0x22, 4, 0x24, 0x00, 0x23, 0x00) // local.tee 4; global.set 0; global.get 0
	case 11: // an early return
		g.expr(depth + 1)
		g.op(0x04, 0x40)
		g.expr(depth + 1)
		g.op(0x0f, 0x0b) // return end
		g.expr(depth + 1)
	case 12: // memory.fill of a size under 512, then the size
		g.expr(depth + 1)
		g.i32(0xff00)
		g.op(0x71)
		g.expr(depth + 1)
		g.expr(depth + 1)
		g.i32(0x1ff)
		g.op(0x71, 0x22, 4, 0xfc, 11, 0x00, 0x20, 4) // i32.and; local.tee 4; memory.fill; local.get 4
	}
}

// module returns the generated module.
func (g *progGen) module() []byte {
	g.nf = 1 + int(g.next())%4
	var code []byte
	for g.cur = 0; g.cur < g.nf; g.cur++ {
		g.b, g.calls, g.loops = g.b[:0], 0, 0
		g.op(0x01, genLocals, 0x7f) // locals
		g.expr(0)
		g.op(0x0b)
		code = appendU32(code, uint32(len(g.b)))
		code = append(code, g.b...)
	}
	// spin: (loop (drop (call 0 (local.get 0) (local.get 1))) (br 0)) unreachable
	spin := []byte{0x00, 0x03, 0x40, 0x20, 0x00, 0x20, 0x01, 0x10, 0x00, 0x1a, 0x0c, 0x00, 0x0b, 0x00, 0x0b}
	code = appendU32(code, uint32(len(spin)))
	code = append(code, spin...)

	funcs := appendU32(nil, uint32(g.nf+1))
	for range g.nf + 1 {
		funcs = append(funcs, 0x00)
	}
	var exports []byte
	exports = append(appendName(exports, "f0"), 0x00, 0x00)
	exports = append(appendName(exports, "spin"), 0x00)
	exports = appendU32(exports, uint32(g.nf))
	exports = append(appendName(exports, "mem"), 0x02, 0x00)
	exports = append(appendName(exports, "g"), 0x03, 0x00)

	m := []byte("\x00asm\x01\x00\x00\x00")
	m = appendSection(m, secType, []byte{0x01, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f})
	m = appendSection(m, secFunction, funcs)
	m = appendSection(m, secMemory, []byte{0x01, 0x00, 0x01})
	m = appendSection(m, secGlobal, []byte{0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b})
	m = appendSection(m, secExport, append([]byte{0x04}, exports...))
	return appendSection(m, secCode, append(appendU32(nil, uint32(g.nf+1)), code...))
}

func appendSection(m []byte, id byte, payload []byte) []byte {
	m = appendU32(append(m, id), uint32(len(payload)))
	return append(m, payload...)
}

// outcome is what a call of f0 did: its result or trap, and the state it
// left.
type outcome struct {
	result uint64
	trap   string
	mem    [32]byte
	global uint64
}

func runF0(t *testing.T, rt wazero.Runtime, cm wazero.CompiledModule, a, b uint64) outcome {
	t.Helper()
	ctx := context.Background()
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatalf("instantiating: %v", err)
	}
	defer mod.Close(ctx)
	var o outcome
	res, err := mod.ExportedFunction("f0").Call(ctx, a, b)
	if err != nil {
		// The trap's reason; the stack trace after it names the same
		// functions, but the instrumented one's may hold its slow path.
		o.trap, _, _ = strings.Cut(err.Error(), "\n")
	} else {
		o.result = res[0]
	}
	buf, _ := mod.ExportedMemory("mem").Read(0, 65536)
	o.mem = sha256.Sum256(buf)
	o.global = mod.ExportedGlobal("g").Get()
	return o
}

// stopBound is how long an instrumented module may run after its stop
// flag is set, on a loaded machine: its slow path runs every Budget units
// of work, well under a millisecond.
const stopBound = time.Second

// FuzzInstrumentDifferential runs generated modules (wazero's interpreter)
// and their instrumented forms (its compiler, as workers run them) on the
// same inputs: same result or same trap, same memory and global after. Then it runs the instrumented one's spin, which calls f0
// for ever, sets the stop flag after a short deadline, and checks that it
// stops within stopBound.
func FuzzInstrumentDifferential(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 1, 2, 3, 4, 5, 6, 7, 0},
		{1, 0, 0, 0, 9, 0, 0, 0, 3, 2, 0, 5, 1, 0, 0},
		{3, 4, 5, 6, 7, 8, 9, 10, 3, 8, 1, 8, 2, 1, 1, 1, 3, 5, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 1, 0, 2, 0, 0, 16, 2},
		{5, 0, 0, 0, 255, 255, 255, 255, 1, 9, 0, 1, 0, 0},
		{7, 0, 0, 0, 0, 0, 0, 0, 3, 5, 0, 0, 0, 0, 8, 0, 200, 0, 0, 5, 1, 0, 0, 5, 0, 1, 1, 0},
		{9, 0, 0, 0, 3, 0, 0, 0, 0, 12, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 255, 1, 0},
		{2, 0, 0, 0, 2, 0, 0, 0, 1, 11, 1, 0, 1, 1, 10, 1, 0, 8, 0, 255, 0, 0, 8, 0, 255, 0, 0, 6, 1, 0, 3},
	} {
		f.Add(seed)
	}
	f.Fuzz(diffOne)
}

// diffRuntime runs FuzzInstrumentDifferential's instrumented modules:
// compiled, as workers run them, with wazero's termination checks off.
// diffInterp runs the originals: the interpreter compiles five times
// faster, and executes the same semantics.
var (
	diffRuntime = wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfig().WithCloseOnContextDone(false))
	diffInterp  = wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfigInterpreter())
)

// diffOne is one input of FuzzInstrumentDifferential.
func diffOne(t *testing.T, data []byte) {
	if len(data) < 8 {
		return
	}
	ctx, rt := context.Background(), diffRuntime
	a := uint64(binary.LittleEndian.Uint32(data))
	b := uint64(binary.LittleEndian.Uint32(data[4:]))
	g := &progGen{data: data[8:]}
	wasm := g.module()
	res, err := Instrument(wasm)
	if err != nil {
		t.Fatalf("instrumenting a generated module: %v", err)
	}
	orig, err := diffInterp.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("compiling a generated module: %v", err)
	}
	defer orig.Close(ctx)
	inst, err := rt.CompileModule(ctx, res.Wasm)
	if err != nil {
		t.Fatalf("compiling an instrumented module: %v", err)
	}
	defer inst.Close(ctx)
	want := runF0(t, diffInterp, orig, a, b)
	got := runF0(t, rt, inst, a, b)
	if got != want {
		t.Fatalf("f0(%d, %d): instrumented %+v, original %+v", a, b, got, want)
	}

	mod, err := rt.InstantiateModule(ctx, inst, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	stop := mod.ExportedGlobal(StopExport).(api.MutableGlobal)
	done := make(chan error, 1)
	go func() {
		_, err := mod.ExportedFunction("spin").Call(ctx, a, b)
		done <- err
	}()
	var set time.Time
	select {
	case err := <-done:
		// f0 trapped: the loop ends with it.
		if err == nil || want.trap == "" {
			t.Fatalf("spin returned %v, and f0 does not trap", err)
		}
		return
	case <-time.After(time.Millisecond):
		set = time.Now()
		stop.Set(1)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("spin returned")
		}
		if el := time.Since(set); el > stopBound {
			t.Fatalf("spin stopped %v after its flag was set, more than %v", el, stopBound)
		}
	case <-time.After(stopBound + 30*time.Second):
		t.Fatalf("spin still runs %v after its flag was set", stopBound+30*time.Second)
	}
}

// TestProgGenValid: the generator's modules are valid for wazero whatever
// the bytes, and exercise their features.
func TestProgGenValid(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	var all []byte
	for i := range 2000 {
		data := make([]byte, 64)
		for j := range data {
			data[j] = byte((i*7919 + j*104729 + j*j*31) >> (j % 5))
		}
		g := &progGen{data: data}
		wasm := g.module()
		cm, err := rt.CompileModule(ctx, wasm)
		if err != nil {
			t.Fatalf("input %x: %v", data, err)
		}
		_ = cm.Close(ctx)
		all = append(all, wasm...)
	}
	for _, op := range [][]byte{{0x03, 0x40}, {0x10, 0x01}, {0xfc, 11}, {0x0f, 0x0b}, {0x05, 0x00, 0x0b}, {0x36, 0x02}} {
		if !bytes.Contains(all, op) {
			t.Errorf("no generated module holds %x", op)
		}
	}
}
