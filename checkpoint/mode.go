package checkpoint

import "github.com/wstream/wstream/subtask"

// Mode is how a subtask lines up the barriers of a checkpoint; package
// subtask owns it, with the barrier handler that implements it.
type Mode = subtask.Mode

const (
	ExactlyOnce = subtask.ExactlyOnce
	AtLeastOnce = subtask.AtLeastOnce
	Unaligned   = subtask.Unaligned
)

// ErrInvalidMode is wrapped by ParseMode for a name it does not know.
var ErrInvalidMode = subtask.ErrInvalidMode

// ParseMode reads a mode name: "exactly-once" (or "aligned"),
// "at-least-once", or "unaligned".
func ParseMode(s string) (Mode, error) { return subtask.ParseMode(s) }
