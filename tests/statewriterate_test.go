package tests

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// TestStateWriteRate runs a tenant's state flood (bench-state.wat: 4 MB of
// distinct 16 KiB values per call, call after call, on two subtasks) on an
// engine with tenants, real NATS accounts, Pebble and wazero, under a
// state write rate quota of 2 MiB/s. The bytes its keyed state commits to
// Pebble, as the worker reports them, never pass what the rate allows since
// the job was submitted, plus one turn's writes of each subtask (the rate
// is charged after the fact); its subtasks report the time they waited;
// and cancelling the job, its subtasks waiting under the rate, ends it.
func TestStateWriteRate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	auth, err := tenant.Open(filepath.Join(dir, "auth"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		rate = 2 << 20
		// memoryMiB bounds what a subtask holds unflushed: half of it.
		memoryMiB = 4
		// A turn is one call: up to 256 values of 16 KiB (4 MiB and
		// their keys), plus what its store held unflushed before it.
		perTurn = 4<<20 + 256<<7 + memoryMiB<<20/2
		target  = 24 << 20
	)
	if _, _, err := auth.Add("bolt", tenant.Quotas{MemoryMiB: memoryMiB, StateWriteRate: rate}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	e, err := engine.Start(ctx, engine.Options{Tenants: auth, Workers: 1, DataDir: data, Listen: "127.0.0.1:0", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	url, err := engine.LocalURL(data)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := auth.TenantUser("bolt", "test")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, cr.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	watch, err := coordinator.WatchJobs(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	d, err := engine.Prepare(ctx, e.Runtime(), engine.PrepareOptions{
		ModulePath: testmod.WATModule(t, "examples/wasm/hostile/bench-state.wat"), Name: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	digest, err := coordinator.StoreModule(ctx, nc, d.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	id, err := coordinator.Submit(ctx, nc, transport.SubmitRequest{Name: d.Name, Plan: d.Plan.JSON(), ModuleName: d.ModuleName, ModuleDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	sample := func() (written, pacedMillis int64, subtasks int) {
		for _, m := range e.Workers()[0].SubtaskMetrics() {
			if m.JobID == id && m.Vertex == "op" {
				written += m.StateWrittenBytes
				pacedMillis += m.StatePacedMillis
				subtasks++
			}
		}
		return
	}
	var written, paced int64
	for deadline := start.Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		written, paced, n = sample()
		elapsed := time.Since(start)
		if most := rate + int64(elapsed.Seconds()*rate) + int64(n)*perTurn; written > most {
			t.Fatalf("%s after submitting, the flood's %d subtasks had written %d bytes of state, over the %d that a rate of %d bytes/s allows",
				elapsed.Round(time.Millisecond), n, written, most, rate)
		}
		if written >= target {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flood wrote %d bytes of state in %s, want %d", written, time.Since(start), target)
		}
	}
	if paced == 0 {
		t.Fatalf("the flood wrote %d bytes of state and its subtasks report no wait under the rate", written)
	}
	t.Logf("%d bytes written in %s, subtasks waited %d ms", written, time.Since(start).Round(time.Millisecond), paced)
	if err := coordinator.Cancel(ctx, nc, id); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := watch.Wait(wctx, id)
	if err != nil {
		t.Fatalf("the cancelled flood did not end: %v", err)
	}
	if res.State != transport.JobCanceled {
		t.Fatalf("the cancelled flood's job ended %s: %s", res.State, res.Error)
	}
}
