// Package wstream is the Go guest SDK of wstream: it turns a Go package into
// a WebAssembly module of stream operators that the wstream host runs in a
// sandbox. It implements every export of the wstream ABI (abi/ABI.md) and
// wraps every host import, so that operators see records, state and timers
// rather than pointers and buffers.
//
// Build a module with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o ops.wasm .
//
// A module registers its operators, and optionally its job plan, from init
// functions (a c-shared module runs init functions but never main):
//
//	type count struct{ n wstream.ValueState }
//
//	func (c *count) Open(ctx *wstream.Context) error {
//		c.n = ctx.ValueState("count") // states are registered in Open
//		return nil
//	}
//
//	func (c *count) Process(ctx *wstream.Context, r wstream.Record) error {
//		n, _, err := c.n.GetInt64() // state of the current key, r.Key
//		if err != nil {
//			return err
//		}
//		if err := c.n.PutInt64(n + 1); err != nil {
//			return err
//		}
//		ctx.Emit(r.Key, strconv.AppendInt(nil, n+1, 10), r.Timestamp)
//		return nil
//	}
//
//	func init() {
//		wstream.Register("count", func() wstream.Operator { return &count{} })
//	}
//
//	func main() {}
//
// # Calls and lifetimes
//
// The host opens one operator instance per slot and calls it from a single
// thread: Open, then Process once per input record (the SDK decodes each
// input batch in place), OnTimer per fired timer, the checkpoint hooks, and
// Close after the input ended. Slices handed to an operator (Record, Timer,
// values read from state) alias SDK or host buffers and are valid only during
// the call: copy what must outlive them. State is cached for the duration of
// a callback and written back to the host when it ends (abi/ABI.md, "How
// the SDKs use them").
//
// # Output
//
// Emit and EmitTo copy records into one reusable output buffer that the SDK
// hands to the host in a single emit_batch call when the callback returns (or
// early, at the first emit past 64 KiB); EmitReserve appends a record whose
// value the operator writes into that buffer in place. An output error
// fails the callback.
//
// # Errors
//
// An error returned by an operator, or a panic (reported with its value, its
// stack going to stderr), fails the callback: the SDK calls the host's fail
// with "operator NAME: PHASE: message", drops the callback's buffered output
// and returns GUEST_ERROR, and the host fails the job (or, in dead-letter
// mode, sends the record to the dead letters: the SDK tells the host which
// record or timer each callback is at through progress_at, so the host
// need not search the batch for it, and marks the commit points the host
// asks for with commit, so that the records before the last one need not
// run again). Host status codes
// become Go errors wrapping ErrNotFound, ErrKeyGroup and the other sentinels.
// Misuse of the API (a state name not registered in Open, a state used as the
// wrong kind) panics with a message that names the state and the fix.
//
// # Keyed state and timers
//
// ValueState and MapState act on the current key: the record's key in
// Process, the timer's key in OnTimer. ValueState.Namespace addresses one
// value per namespace (for example a window). Timers are keyed too:
// RegisterEventTimer(ts, ns) fires OnTimer once the watermark reaches ts, with
// the same key and namespace. The host refuses keyed state and timers to an
// operator whose input is not key-partitioned (ErrNoKeyedState).
//
// Outside GOOS=wasip1 the package compiles, so that host-side tools build and
// vet the whole module tree, but it has no host: every host call reports
// ErrNotInCallback.
package wstream
