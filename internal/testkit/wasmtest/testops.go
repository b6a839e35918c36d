package wasmtest

import (
	"testing"

	"github.com/wstream/wstream/abi"
)

// The checks below drive operators that the testops modules of the C and
// Rust SDKs both have, to check the parts of each SDK the examples leave
// out; a check of one SDK alone stays in its package.

// CheckRoute opens the route operator of l's testops module in slot 0 of a
// host with outputs main and side, and checks that it emits on both, with
// the unbuffered emit flushing what was buffered first; and that it cannot
// open without a side output. It returns the host, route still open.
func (l Lang) CheckRoute(t *testing.T) *Host {
	t.Helper()
	h := l.New(t, "testops", WithOutputs("main", "side"))
	h.MustOpen(0, "route", "")
	h.MustProcess(0, Rec("a", "one", 1), Rec("b", "side:two", 2), Rec("c", "direct:three", 3), Rec("d", "four", 4))
	// The unbuffered emit flushed what was buffered first, so order holds.
	WantRecords(t, "route", h.Take(), "0 a=one@1", "1 b=side:two@2", "0 c=direct:three@3", "0 d=four@4")
	if h.Emits != 1 || h.Batches != 2 {
		t.Errorf("emit calls %d, emit_batch calls %d; want 1 and 2", h.Emits, h.Batches)
	}
	// Without a "side" output the operator cannot open.
	h2 := l.New(t, "testops")
	st, err := h2.OpenOp(0, "route", "")
	WantFailure(t, h2, "open route", st, err, abi.StatusGuestError, `operator "route": open: output "side": bad output`)
	return h
}

// CheckBadOutput checks that the badport operator of l's testops module,
// which emits to a port the vertex lacks, fails the call and emits
// nothing.
func (l Lang) CheckBadOutput(t *testing.T) {
	t.Helper()
	h := l.New(t, "testops")
	h.MustOpen(0, "badport", "")
	st, err := h.ProcessCtx(h.Ctx, 0, []abi.Record{Rec("k", "v", 1), Rec("k", "w", 2)})
	WantFailure(t, h, "process", st, err, abi.StatusGuestError, `operator "badport": process: emitting 2 records: bad output`)
	if len(h.Out) != 0 {
		t.Errorf("emitted %d records to a bad output", len(h.Out))
	}
}
