package host

import (
	"testing"

	"github.com/wstream/wstream/abi"
)

// progressOverrides is a guest that names address 1024 for its progress
// at open, writes index 7 there in wstream_process and then fails as how
// says: a trap, or fail with status GUEST_ERROR, or succeeds.
func progressOverrides(how string) map[string]string {
	end := `(unreachable)`
	switch how {
	case "fail":
		end = `(call $fail (i32.const 0) (i32.const 0)) (i32.const -11)`
	case "ok":
		end = `(i32.const 0)`
	}
	return map[string]string{
		abi.ExportOpen: `(func (export "wstream_open") (param i32 i32 i32 i32 i32) (result i32)
    (drop (call $progress_at (i32.const 1024))) (i32.const 0))`,
		abi.ExportProcess: `(func (export "wstream_process") (param i32 i32 i32) (result i32)
    (i32.store (i32.const 1024) (i32.const 7)) ` + end + `)`,
	}
}

// TestProgressAtNamesTheFailedRecord: the index a guest keeps at the
// address it named is what FailedAt reports after a trap or a fail, and
// nothing after a success or without a failure since.
func TestProgressAtNamesTheFailedRecord(t *testing.T) {
	var b abi.Builder
	for i := range 10 {
		b.Add(0, int64(i), []byte("k"), []byte("v"))
	}
	for _, how := range []string{"trap", "fail", "ok"} {
		t.Run(how, func(t *testing.T) {
			g := newRig(t, progressOverrides(how))
			err := g.s.Process(b.Bytes(), g.out)
			want := 7
			if how == "ok" {
				want = -1
				if err != nil {
					t.Fatal(err)
				}
			} else if err == nil {
				t.Fatal("the call did not fail")
			}
			if got := g.inst.FailedAt(); got != want {
				t.Errorf("FailedAt() = %d, want %d", got, want)
			}
		})
	}
}

// TestProgressAtChecksTheAddress: a misaligned address or one whose four
// bytes are outside memory is refused; 0 turns progress off.
func TestProgressAtChecksTheAddress(t *testing.T) {
	g := newRig(t, nil)
	for _, c := range []struct {
		ptr  uint64
		want int32
	}{
		{1024, abi.StatusOK},
		{1026, abi.StatusBadArgument},
		{2*65536 - 4, abi.StatusOK},
		{2 * 65536, abi.StatusBadArgument},
		{0, abi.StatusOK},
	} {
		if st := g.call(phaseIdle, abi.ImportProgressAt, c.ptr); st != c.want {
			t.Errorf("progress_at(%#x) = %d, want %d", c.ptr, st, c.want)
		}
	}
	if g.inst.progress != 0 {
		t.Errorf("progress_at(0) left the address at %#x", g.inst.progress)
	}
}
