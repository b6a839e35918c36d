package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/transport"
)

// attackModuleRSSBound bounds the worker's resident set (KiB) while bolt's
// modules reach it. The worker runs acme's Go job meanwhile, about 100–150
// MiB; each module admitted would have added from 1 GiB (the table, the
// locals) to the whole machine's memory (a table of 0xfffffff0 elements).
const attackModuleRSSBound = 400 << 10

// hostilePlan is the plan of the modules of examples/wasm/hostile: one
// record from gen, over a key edge, into the operator op, then discarded.
func hostilePlan(op string) json.RawMessage {
	return json.RawMessage(`{"name":"hostile-` + op + `","parallelism":1,"vertices":[
 {"id":"source","kind":"source","connector":"gen","config":{"count":1,"keys":1}},
 {"id":"op","kind":"operator","operator":"` + op + `"},
 {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"op","partition":"key"},{"from":"op","to":"sink"}]}`)
}

// hostileWAT assembles examples/wasm/hostile/name.
func hostileWAT(t *testing.T, name string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "examples", "wasm", "hostile", name))
	if err != nil {
		t.Fatal(err)
	}
	return testmod.WAT(t, string(src))
}

// localsBomb is a module of 36 bytes whose one function, never called,
// declares 32M i32 locals: compiling it took wazero about 26 bytes a
// local (885 MB).
var localsBomb = []byte("\x00asm\x01\x00\x00\x00" +
	"\x01\x04\x01\x60\x00\x00" + // type () -> ()
	"\x03\x02\x01\x00" + // one function
	"\x0a\x09\x01\x07\x01\x80\x80\x80\x10\x7f\x0b") // body: 0x2000000 i32 locals, end

// TestAttackModule: tenant bolt submits, by hand over NATS as a hostile
// client would, modules that would take the worker's memory or its
// deadlines: one exporting the instrumentation's stop flag name with a
// loop-free call tree (which wazero's own checks cannot stop), one whose
// table starts at 2^27 elements (1 GiB), one declaring 32M locals (885 MB
// to compile). Each is refused at deployment, before the worker compiles
// it, with an error naming the admission limit and where. Through the
// CLI, a module growing its table by 0xfffffff0 and 2^27 elements gets -1
// and fails its own job. The worker's resident set stays bounded, the
// worker alive, and acme's job exact.
func TestAttackModule(t *testing.T) {
	mod := module(t, "testops")
	c, tenants := startAttackCluster(t, "acme", "bolt")
	acme, bolt := tenants["acme"], tenants["bolt"]
	g := genSpec{count: 12000, keys: 50, words: 1, seed: 23, rate: 3000}
	d, _ := c.victimJob(t, acme, mod, g)
	rss := watchRSS(t, c.wk.cmd.Process.Pid)

	for _, a := range []struct {
		name string
		wasm []byte
		op   string
		want []string
	}{
		{"reserved-stop.wat", hostileWAT(t, "reserved-stop.wat"), "tree",
			[]string{`export section, export`, `the name "wstream:stop" is reserved for the host's instrumentation`}},
		{"table-min.wat", hostileWAT(t, "table-min.wat"), "tmin",
			[]string{"table section, table 0", "134217728 elements at the table's minimum, over the admission limit of 262144 (TableElements)"}},
		{"locals bomb", localsBomb, "none",
			[]string{"code section, function 0", "33554432 locals, over the admission limit of 50000 (LocalsPerFunction)"}},
	} {
		digest, err := coordinator.StoreModule(waitCtx(t), bolt.nc, a.wasm)
		if err != nil {
			t.Fatal(err)
		}
		e := ask(bolt.nc, transport.SubjectSubmit, transport.SubmitRequest{Name: "attack", Plan: hostilePlan(a.op), ModuleDigest: digest, ModuleName: a.name})
		for _, w := range a.want {
			if !strings.Contains(e, w) {
				t.Errorf("%s: submit answered %q, want it to say %q", a.name, e, w)
			}
		}
		if peak := rss.reset(); peak > attackModuleRSSBound {
			t.Errorf("%s: the worker's resident set reached %d MiB, over %d MiB", a.name, peak>>10, attackModuleRSSBound>>10)
		}
		c.workerAlive(t)
	}

	// The table grows through the CLI, which compiles the module itself
	// first (as the admin's, so uncapped): the worker's copy, a tenant's,
	// has its table capped at 2^18 elements.
	dir := t.TempDir()
	p := filepath.Join(dir, "table-grow.wasm")
	if err := os.WriteFile(p, hostileWAT(t, "table-grow.wat"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runWith(t, dir, nil, 2*time.Minute, "deploy", "--nats", c.url, "--nats-creds", bolt.creds, p)
	if r.code == 0 || !strings.Contains(r.stderr, "table.grow refused") {
		t.Errorf("table-grow: exit %d, want a failed job saying table.grow refused:\n%s", r.code, r.stderr)
	}
	if peak := rss.reset(); peak > attackModuleRSSBound {
		t.Errorf("table-grow: the worker's resident set reached %d MiB, over %d MiB", peak>>10, attackModuleRSSBound>>10)
	}
	c.victimExact(t, acme, d, g)
	if peak := rss.reset(); peak > attackModuleRSSBound {
		t.Errorf("the worker's resident set reached %d MiB, over %d MiB", peak>>10, attackModuleRSSBound>>10)
	}
}
