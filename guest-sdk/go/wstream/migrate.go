package wstream

import (
	"fmt"
	"math"

	"github.com/wstream/wstream/abi"
)

// MigrateFunc converts one value of a state whose layout version rose:
// version is the layout version the value was written with, key and ns
// the entry's key and namespace (a map state's map key, a window). It
// returns the value in the new layout. The slices are valid only during
// the call; the result may alias value. An error fails the restore, and an
// upgrade rolls back.
type MigrateFunc func(version int, key, ns, value []byte) ([]byte, error)

// RegisterMigration registers fn to convert the values of state of operator
// (the operator's name, as in Register) when a job is restored from a
// savepoint whose plan declares an older layout version of the state than
// the module's plan ("states": [{"name": …, "kind": …, "version": N}],
// see docs/upgrade.md). The host calls it once per entry of the state,
// before the operator opens. Call it from an init function. Registering
// twice, or an empty name or nil fn, panics.
func RegisterMigration(operator, state string, fn MigrateFunc) {
	switch {
	case operator == "" || state == "":
		panic("wstream: RegisterMigration: empty operator or state name")
	case fn == nil:
		panic(fmt.Sprintf("wstream: RegisterMigration(%q, %q): nil function", operator, state))
	}
	if mod.migrations == nil {
		mod.migrations = make(map[migrationKey]MigrateFunc)
	}
	k := migrationKey{operator, state}
	if _, dup := mod.migrations[k]; dup {
		panic(fmt.Sprintf("wstream: RegisterMigration: state %q of operator %q registered twice", state, operator))
	}
	mod.migrations[k] = fn
}

type migrationKey struct{ operator, state string }

// migrate runs the migration of one entry (wstream_migrate) and returns
// the new value, kept in mod.migrated until the next call, or a status
// (after fail, with the reason).
func (m *module) migrate(op, state []byte, version int32, key, ns, value []byte) ([]byte, int32) {
	fn := m.migrations[migrationKey{string(op), string(state)}]
	if fn == nil {
		hostFail(fmt.Sprintf("no migration registered for state %q of operator %q (wstream.RegisterMigration)", state, op))
		return nil, abi.StatusBadArgument
	}
	var out []byte
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		out, err = fn(int(version), key, ns, value)
	}()
	if err != nil {
		hostFail(fmt.Sprintf("migrating state %q of operator %q from version %d: %v", state, op, version, err))
		return nil, abi.StatusBadArgument
	}
	if len(out) > math.MaxInt32 {
		hostFail(fmt.Sprintf("migrating state %q of operator %q: a value of %d bytes", state, op, len(out)))
		return nil, abi.StatusLimit
	}
	// The host copies the value out after the call: keep it until then.
	m.migrated = append(m.migrated[:0], out...)
	return m.migrated, abi.StatusOK
}
