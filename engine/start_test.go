package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/transport"
)

// initLogWAT is a pass-through operator module whose _initialize logs
// "initialized": the log counts the module's instances, the probe that
// validation runs included.
const initLogWAT = `(module
  (import "wstream" "log" (func $log (param i32 i32 i32)))
  (import "wstream" "emit_batch" (func $emit_batch (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "initialized")
  (func (export "_initialize") (call $log (i32.const 1) (i32.const 16) (i32.const 11)))
  (func (export "wstream_abi_version") (result i32) (i32.const %d))
  (func (export "wstream_alloc") (param i32) (result i32)
    (if (i32.gt_u (local.get 0) (i32.const 65536)) (then (return (i32.const 0))))
    (i32.const 65536))
  (func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_process") (param i32 i32 i32) (result i32)
    (call $emit_batch (local.get 1) (local.get 2)))
  (func (export "wstream_on_timer") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "wstream_close") (param i32) (result i32) (i32.const 0)))`

// TestModuleCompiledOnce: the embedded engine's worker runs a job's module
// as Prepare compiled and probed it, and instantiates it once per subtask
// that runs it, on every deployment.
func TestModuleCompiledOnce(t *testing.T) {
	var mu sync.Mutex
	inits := 0
	// The text handler writes each line with one Write.
	logs := writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), " msg=initialized ") {
			mu.Lock()
			inits++
			mu.Unlock()
		}
		return len(p), nil
	})
	dir := t.TempDir()
	e, err := Start(context.Background(), Options{DataDir: dir, Stdout: io.Discard,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	mod := filepath.Join(dir, "init.wasm")
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(mod, testmod.WAT(t, fmt.Sprintf(initLogWAT, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plan, []byte(`{"name":"once","parallelism":3,"vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":10,"keys":5}},
 {"id":"op","kind":"operator","operator":"id"},
 {"id":"out","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"op"},{"from":"op","to":"out"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return inits
	}
	for i, want := range []int{1 + 3, 1 + 3 + 3} {
		d, err := Prepare(context.Background(), e.Runtime(), PrepareOptions{ModulePath: mod, PlanPath: plan})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && count() != 1 {
			t.Fatalf("validation instantiated the module %d times, want once", count())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err := e.Run(ctx, d, nil)
		cancel()
		if err != nil || r.State != transport.JobFinished {
			t.Fatalf("run %d: %v %+v", i, err, r)
		}
		if got := count(); got != want {
			t.Fatalf("after run %d: %d instances, want %d (one probe, one per subtask)", i, got, want)
		}
	}
}

// TestDataDirOwner: a second engine on a data directory in use fails at
// once, naming the process that holds it, and takes it over once the first
// has closed.
func TestDataDirOwner(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first, err := Start(ctx, Options{DataDir: dir, Stdout: io.Discard, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, Options{DataDir: dir, Stdout: io.Discard, Listen: "127.0.0.1:0"})
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		_ = first.Close(ctx)
		t.Fatalf("second engine on %s: %v", dir, err)
	}
	// The refused engine touched nothing: the first's URL file is there.
	if _, err := LocalURL(dir); err != nil {
		t.Fatalf("the refused engine removed the first's URL file: %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := Start(ctx, Options{DataDir: dir, Stdout: io.Discard})
	if err != nil {
		t.Fatalf("after the first engine closed: %v", err)
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
