package host

import (
	"fmt"
	"math"

	"github.com/wstream/wstream/abi"
)

// CanMigrate reports whether the module exports wstream_migrate.
func (m *Module) CanMigrate() bool {
	_, ok := m.c.code.cm.ExportedFunctions()[abi.ExportMigrate]
	return ok
}

// Migrate converts one value of a state whose layout version rose: it
// writes the operator name, the state name, the key, the namespace and the
// old value back to back into the guest's arena and calls
//
//	wstream_migrate(op_ptr, op_len, state_ptr, state_len, version,
//	                key_ptr, key_len, ns_ptr, ns_len, val_ptr, val_len) -> i64
//
// where version is the layout version the value was written with. The
// result is (ptr << 32) | len of the new value in guest memory, which is
// copied out; a result in [-2^31, -1] is a status and fails the migration,
// as a trap, a deadline or a call of fail does. Host functions other than
// log and fail return NOT_IN_CALLBACK during the call. The returned slice
// is the caller's.
func (i *Instance) Migrate(op, state string, version int, key, ns, value []byte) ([]byte, error) {
	const call = abi.ExportMigrate
	if i.fn(expMigrate) == nil {
		if err := i.usable(nil, call); err != nil {
			return nil, err
		}
		return nil, &GuestError{Operator: op, Subtask: -1, Call: call, Err: ErrGuestFailed,
			Message: "the module does not export " + call + ", and the plan raised the layout version of state " + quoteText(state)}
	}
	if version < 0 || version > math.MaxInt32 {
		return nil, fmt.Errorf("host: %s: version %d out of range", call, version)
	}
	args := i.migrateArgs[:0]
	args = append(args, op...)
	args = append(args, state...)
	args = append(args, key...)
	args = append(args, ns...)
	args = append(args, value...)
	i.migrateArgs = args
	ptr, err := i.write(nil, call, "", args)
	if err != nil {
		return nil, err
	}
	// The arena write may have called wstream_alloc, which drops nothing
	// but may have renewed handles: take the function only now.
	fn := i.fn(expMigrate)
	p := uint64(ptr)
	at := func(n int) (uint64, uint64) { start := p; p += uint64(n); return start, uint64(n) }
	i.stack[0], i.stack[1] = at(len(op))
	i.stack[2], i.stack[3] = at(len(state))
	i.stack[4] = uint64(version)
	i.stack[5], i.stack[6] = at(len(key))
	i.stack[7], i.stack[8] = at(len(ns))
	i.stack[9], i.stack[10] = at(len(value))
	if _, err := i.call(nil, phaseMigrate, nil, fn, call, 11); err != nil {
		return nil, err
	}
	r := int64(i.stack[0])
	if i.failed {
		i.failed = false
		return nil, &GuestError{Operator: op, Subtask: -1, Call: call, Err: ErrGuestFailed,
			Message: fmt.Sprintf("state %s: %s", quoteText(state), i.failMsg)}
	}
	if r < 0 && r >= math.MinInt32 {
		return nil, &GuestError{Operator: op, Subtask: -1, Call: call, Status: int32(r), Err: ErrGuestFailed,
			Message: fmt.Sprintf("state %s: returned status %d (%s)", quoteText(state), r, abi.StatusText(int32(r)))}
	}
	vptr, n := uint32(uint64(r)>>32), uint32(uint64(r))
	b, ok := i.mem.Read(vptr, n)
	if !ok {
		return nil, &GuestError{Operator: op, Subtask: -1, Call: call, Err: ErrGuestFailed,
			Message: fmt.Sprintf("state %s: returned the region [%#x, +%d), outside guest memory (%d bytes)", quoteText(state), vptr, n, i.mem.Size())}
	}
	return append([]byte(nil), b...), nil
}

func quoteText(s string) string { return "\"" + EscapeGuestText([]byte(s), 256, false) + "\"" }
