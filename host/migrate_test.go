package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// migrateWAT's wstream_migrate writes value ‖ key ‖ ns ‖ state ‖ op at
// 0x8000 and returns it, so the test sees every argument where it belongs;
// versions 6 to 9 fail in each way a migration can fail.
const migrateWAT = `
  (func (export "wstream_migrate")
    (param $op i32) (param $opn i32) (param $st i32) (param $stn i32) (param $ver i32)
    (param $k i32) (param $kn i32) (param $ns i32) (param $nsn i32) (param $v i32) (param $vn i32)
    (result i64)
    (local $at i32)
    (if (i32.eq (local.get $ver) (i32.const 9)) (then (return (i64.const -5))))
    (if (i32.eq (local.get $ver) (i32.const 8))
      (then (call $fail (local.get $v) (local.get $vn)) (return (i64.const 0))))
    (if (i32.eq (local.get $ver) (i32.const 7)) (then (return (i64.const 0x7ffffff000000100))))
    (if (i32.eq (local.get $ver) (i32.const 6)) (then unreachable))
    (local.set $at (i32.const 0x8000))
    (memory.copy (local.get $at) (local.get $v) (local.get $vn))
    (local.set $at (i32.add (local.get $at) (local.get $vn)))
    (memory.copy (local.get $at) (local.get $k) (local.get $kn))
    (local.set $at (i32.add (local.get $at) (local.get $kn)))
    (memory.copy (local.get $at) (local.get $ns) (local.get $nsn))
    (local.set $at (i32.add (local.get $at) (local.get $nsn)))
    (memory.copy (local.get $at) (local.get $st) (local.get $stn))
    (local.set $at (i32.add (local.get $at) (local.get $stn)))
    (memory.copy (local.get $at) (local.get $op) (local.get $opn))
    (local.set $at (i32.add (local.get $at) (local.get $opn)))
    (i64.or (i64.shl (i64.const 0x8000) (i64.const 32)) (i64.extend_i32_u (i32.sub (local.get $at) (i32.const 0x8000)))))
`

func TestMigrate(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m := compileWAT(t, r, moduleWAT(nil, migrateWAT))
	if !m.CanMigrate() {
		t.Fatal("CanMigrate is false for a module that exports wstream_migrate")
	}
	inst := newInstance(t, m)
	got, err := inst.Migrate("count", "n", 1, []byte("word"), []byte("NS"), []byte("VALUE"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "VALUEwordNSncount" {
		t.Fatalf("migrated value %q, want the arguments in the order value, key, ns, state, op", got)
	}
	// Empty arguments are empty strings, wherever their pointers point.
	got, err = inst.Migrate("c", "s", 2, nil, nil, nil)
	if err != nil || string(got) != "sc" {
		t.Fatalf("empty key, ns and value: %q, %v", got, err)
	}

	for _, tc := range []struct {
		version int
		want    string
		broken  bool // the instance is unusable afterwards
	}{
		{9, `state "n": returned status -5 (bad argument)`, false},
		{8, `state "n": cannot read v3`, false},
		{7, `outside guest memory`, false},
		{6, `unreachable`, true},
	} {
		inst := newInstance(t, m)
		_, err := inst.Migrate("count", "n", tc.version, []byte("k"), nil, []byte("cannot read v3"))
		var ge *GuestError
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), tc.want) || ge.Call != "wstream_migrate" {
			t.Errorf("version %d: got %v, want a GuestError of wstream_migrate containing %q", tc.version, err, tc.want)
			continue
		}
		// A failed migration that did not trap leaves the instance usable.
		_, err = inst.Migrate("count", "n", 1, []byte("k"), nil, []byte("v"))
		if (err != nil) != tc.broken {
			t.Errorf("version %d: the next migration: %v", tc.version, err)
		}
	}

	plain := compileWAT(t, r, moduleWAT(nil, ""))
	if plain.CanMigrate() {
		t.Fatal("CanMigrate is true for a module without wstream_migrate")
	}
	_, err = newInstance(t, plain).Migrate("count", "n", 1, nil, nil, []byte("v"))
	if err == nil || !strings.Contains(err.Error(), "does not export wstream_migrate") {
		t.Fatalf("migrating with a module without the export: %v", err)
	}
}

func TestMigrateSignatureChecked(t *testing.T) {
	r := newTestRuntime(t, Config{})
	_, err := r.Compile(t.Context(), "bad.wasm", testmod.WAT(t, moduleWAT(nil, `(func (export "wstream_migrate") (param i32) (result i64) (i64.const 0))`)))
	if err == nil || !strings.Contains(err.Error(), "wstream_migrate") {
		t.Fatalf("a wstream_migrate with the wrong signature: %v", err)
	}
}
