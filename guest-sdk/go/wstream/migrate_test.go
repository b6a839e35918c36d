//go:build !wasip1

package wstream

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wstream/wstream/abi"
)

func TestMigrate(t *testing.T) {
	f := install(t)
	RegisterMigration("count", "n", func(version int, key, ns, value []byte) ([]byte, error) {
		switch version {
		case 1:
			return []byte(fmt.Sprintf("%s/%s/%s", key, ns, value)), nil
		case 2:
			return nil, errors.New("cannot read it")
		}
		panic("version 3")
	})
	got, st := mod.migrate([]byte("count"), []byte("n"), 1, []byte("k"), []byte("ns"), []byte("v"))
	if st != abi.StatusOK || string(got) != "k/ns/v" {
		t.Fatalf("migrate = %q, %d", got, st)
	}
	for _, tc := range []struct {
		op, state string
		version   int32
		want      string
	}{
		{"count", "n", 2, `migrating state "n" of operator "count" from version 2: cannot read it`},
		{"count", "n", 3, "panic: version 3"},
		{"count", "other", 1, `no migration registered for state "other" of operator "count"`},
	} {
		f.fails = nil
		if _, st := mod.migrate([]byte(tc.op), []byte(tc.state), tc.version, nil, nil, nil); st != abi.StatusBadArgument {
			t.Errorf("%s/%s v%d: status %d", tc.op, tc.state, tc.version, st)
		}
		if len(f.fails) != 1 || !strings.Contains(f.fails[0], tc.want) {
			t.Errorf("%s/%s v%d: fail %q, want %q", tc.op, tc.state, tc.version, f.fails, tc.want)
		}
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "registered twice") {
			t.Errorf("a second registration: %v", p)
		}
	}()
	RegisterMigration("count", "n", func(int, []byte, []byte, []byte) ([]byte, error) { return nil, nil })
}
