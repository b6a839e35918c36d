package host

import (
	"reflect"
	"sync"

	"github.com/tetratelabs/wazero/api"
)

// The WebAssembly call stack lives in host memory, outside the memory limit.
// wazero's compiler (v1.12) gives every api.Function handle its own stack, a
// Go []byte that starts at 10 KiB and doubles when a call needs more, for as
// long as it is at most 50,000,000 bytes long; the growth after that fails
// with "stack overflow" (callStackCeiling in
// internal/engine/wazevo/call_engine.go). So one call can hold a stack of
// about 84 MB, plus the 42 MB it was copied from until the garbage collector
// frees it, and wazero keeps the grown stack with the handle after the call
// returns. The host bounds what stays: a handle whose stack grew past
// maxRetainedStack is replaced by a fresh one after the call, and a failed
// or closed instance drops its handles.
const (
	maxRetainedStack  = 1 << 20
	stackOverflowText = "the guest's call stack reached wazero's ceiling of about 84 MB of host memory " +
		"(deep or unbounded recursion); the instance was closed"
)

// stackFields caches, per concrete api.Function type, the index of its
// "stack" slice field, or -1 when it has none.
var stackFields sync.Map // reflect.Type → int

// retainedStack is the size of the call stack that wazero keeps for fn, or
// 0 when it cannot tell (another engine or wazero version). It reads an
// unexported field with reflection, which neither allocates nor writes;
// TestRetainedStackProbe catches a wazero upgrade that renames it.
func retainedStack(fn api.Function) int {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return 0
	}
	e := v.Elem()
	if e.Kind() != reflect.Struct {
		return 0
	}
	t := e.Type()
	idx, ok := stackFields.Load(t)
	if !ok {
		idx = -1
		if f, found := t.FieldByName("stack"); found && f.Type.Kind() == reflect.Slice && len(f.Index) == 1 {
			idx = f.Index[0]
		}
		stackFields.Store(t, idx)
	}
	k := idx.(int)
	if k < 0 {
		return 0
	}
	f := e.Field(k)
	return f.Len() * int(f.Type().Elem().Size())
}
