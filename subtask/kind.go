package subtask

import "fmt"

// Kind says what a snapshot is for. checkpoint.Kind is this type.
type Kind uint8

const (
	// KindCheckpoint is a periodic checkpoint: owned by the system,
	// retained per the job's retention, discarded when subsumed.
	KindCheckpoint Kind = iota + 1
	// KindSavepoint is user-triggered: always aligned, never expires,
	// never discarded by the system.
	KindSavepoint
)

func (k Kind) String() string {
	switch k {
	case KindCheckpoint:
		return "checkpoint"
	case KindSavepoint:
		return "savepoint"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// SubsumedReason is why a subtask drops a pending checkpoint that the
// barrier or trigger of the newer checkpoint by overtook, and
// SubsumedByCancelReason why it drops it for the cancel marker of a newer
// checkpoint by. The checkpoint coordinator recognises a decline whose
// reason ends so and does not count it as a failure.
func SubsumedReason(by int64) string { return fmt.Sprintf("subsumed by checkpoint %d", by) }

// SubsumedByCancelReason: see SubsumedReason.
func SubsumedByCancelReason(by int64) string {
	return fmt.Sprintf("subsumed by cancelled checkpoint %d", by)
}
