package host

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
)

// TestGoGuest runs the Go SDK's misbehaving test operators
// (examples/wasm/go/testops) in a real Go c-shared module.
func TestGoGuest(t *testing.T) {
	wasm, err := os.ReadFile(testmod.GoModule(t, "examples/wasm/go/testops"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	r := newTestRuntime(t, Config{CallTimeout: time.Second, Log: logs.log})
	m, err := r.Compile(context.Background(), "testops.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())

	open := func(t *testing.T, name, config string) operator.Operator {
		t.Helper()
		inst := newInstance(t, m)
		op := inst.Operator()
		spec := operator.Spec{VertexID: "v-" + name, Operator: name, Config: []byte(config), Subtask: 1, Parallel: 2, MaxParallelism: 128}
		if err := op.Open(spec, newFakeServices()); err != nil {
			t.Fatal(err)
		}
		return op
	}
	in := batchOf(rec(0, 10, "k1", "ok"), rec(0, 20, "k2", "bad"), rec(0, 30, "k3", "ok"))

	t.Run("identity", func(t *testing.T) {
		op := open(t, "identity", "")
		out := &fakeCollector{}
		for range 3 {
			out.records = nil
			if err := op.Process(in, out); err != nil {
				t.Fatal(err)
			}
			if got, want := out.String(), "0@10 \"k1\"=\"ok\"\n0@20 \"k2\"=\"bad\"\n0@30 \"k3\"=\"ok\"\n"; got != want {
				t.Fatalf("emitted %q, want %q", got, want)
			}
		}
		if err := op.Close(out); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown operator", func(t *testing.T) {
		op := newInstance(t, m).Operator()
		err := op.Open(operator.Spec{VertexID: "v", Operator: "nope"}, newFakeServices())
		if ge := asGuestError(t, err); !strings.Contains(err.Error(), "nope") || ge.Call != abi.ExportOpen {
			t.Errorf("got %v", err)
		}
	})
	t.Run("fail", func(t *testing.T) {
		op := open(t, "fail", `{"on":"bad"}`)
		err := op.Process(in, &fakeCollector{})
		ge := asGuestError(t, err)
		if !strings.Contains(ge.Message, `testops fail on record value "bad"`) || !errors.Is(err, ErrGuestFailed) || ge.Operator != "v-fail (fail)" {
			t.Errorf("got %+v", ge)
		}
	})
	t.Run("trap", func(t *testing.T) {
		op := open(t, "trap", `{"on":"bad"}`)
		err := op.Process(in, &fakeCollector{})
		ge := asGuestError(t, err)
		for _, w := range []string{"unreachable", `panic: testops trap on record value "bad"`} {
			if !strings.Contains(ge.Message, w) {
				t.Errorf("message %q lacks %q", ge.Message, w)
			}
		}
		if _, ok := logs.find("testops trap on record value"); !ok {
			t.Error("the guest's stderr did not reach the log")
		}
		if err := op.Process(in, &fakeCollector{}); !errors.Is(err, ErrInstanceClosed) {
			t.Errorf("after the trap: %v", err)
		}
	})
	t.Run("sleep", func(t *testing.T) {
		op := open(t, "sleep", `{"on":"bad"}`)
		err := op.Process(in, &fakeCollector{})
		if !errors.Is(err, ErrDeadlineExceeded) || !strings.Contains(err.Error(), "v-sleep (sleep) subtask 1") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("grow", func(t *testing.T) {
		// 64 MiB against the default limit of 16 MiB.
		op := open(t, "grow", `{"mb":64}`)
		err := op.Process(in, &fakeCollector{})
		ge := asGuestError(t, err)
		for _, w := range []string{"fatal error: out of memory", "the instance hit its memory limit of 16 MiB (256 pages)"} {
			if !strings.Contains(ge.Message, w) {
				t.Errorf("message %q lacks %q", ge.Message, w)
			}
		}
		// The worker goes on.
		id := open(t, "identity", "")
		out := &fakeCollector{}
		if err := id.Process(in, out); err != nil || len(out.records) != 3 {
			t.Errorf("identity after grow: %v, %d records", err, len(out.records))
		}
	})
}
