package job

import (
	"fmt"

	"github.com/wstream/wstream/checkpoint"
)

// CheckpointSettings configure a job's checkpoints (plan field
// "checkpoint"; every field is also a deploy flag). Times are milliseconds.
type CheckpointSettings struct {
	// Interval between periodic checkpoints; 0 disables checkpointing.
	Interval int64 `json:"interval"`
	// Mode: "aligned" (exactly-once, the default), "unaligned" or
	// "at-least-once".
	Mode Mode `json:"mode,omitempty"`
	// AlignedTimeout > 0 switches an aligned checkpoint whose alignment
	// lasts longer to unaligned.
	AlignedTimeout int64 `json:"alignedTimeout,omitempty"`
	// Timeout after which a pending checkpoint expires (default 10 min).
	Timeout int64 `json:"timeout,omitempty"`
	// MinPause between the end of one checkpoint and the next trigger.
	MinPause int64 `json:"minPause,omitempty"`
	// MaxConcurrent pending checkpoints (default 1).
	MaxConcurrent int `json:"maxConcurrent,omitempty"`
	// TolerableFailures is how many consecutive failed checkpoints the job
	// tolerates; one more fails it (-1: unlimited).
	TolerableFailures int `json:"tolerableFailures,omitempty"`
	// Retain completed checkpoints (default 1).
	Retain int `json:"retain,omitempty"`
	// Incremental checkpoints upload only the state files that are new
	// since the last one (default true).
	Incremental *bool `json:"incremental,omitempty"`
	// Compression is the zstd level of uploaded files: 0 off, 1 (default)
	// fastest … 4 best.
	Compression *int `json:"compression,omitempty"`
	// SavepointFormat is "canonical" (the default: independent of Pebble's
	// file format) or "native" (self-contained copies of the Pebble files:
	// faster to write and to restore at the same parallelism).
	SavepointFormat string `json:"savepointFormat,omitempty"`
	// LocalRecovery keeps each subtask's last completed snapshot on its
	// worker, so that a subtask restarted there restores its keyed state
	// from that copy instead of checkpoint storage (default false).
	LocalRecovery bool `json:"localRecovery,omitempty"`
	// Storage is where checkpoints go: empty for the coordinator's data
	// directory (which workers must share), or a JetStream object store,
	// nats-obj://BUCKET[/PREFIX], on the cluster's NATS server, so that no
	// shared filesystem is needed.
	Storage string `json:"storage,omitempty"`
}

// IncrementalOn reports whether checkpoints are incremental.
func (c *CheckpointSettings) IncrementalOn() bool { return c.Incremental == nil || *c.Incremental }

// CompressionLevel is the zstd level of uploads.
func (c *CheckpointSettings) CompressionLevel() int {
	if c.Compression == nil {
		return 1
	}
	return *c.Compression
}

// Savepoint formats.
const (
	SavepointCanonical = "canonical"
	SavepointNative    = "native"
)

// Mode is a job's checkpointing mode (plan field checkpoint.mode); ""
// means ModeAligned.
type Mode string

// Checkpoint modes.
const (
	ModeAligned     Mode = "aligned"
	ModeUnaligned   Mode = "unaligned"
	ModeAtLeastOnce Mode = "at-least-once"
)

func (m Mode) valid() bool { _, err := ParseMode(string(m)); return err == nil }

// ParseMode returns the mode s names, and an error naming the modes for
// any other string ("" included: it is a plan's default, not a mode).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAligned, ModeUnaligned, ModeAtLeastOnce:
		return m, nil
	}
	return "", fmt.Errorf("checkpoint mode %q must be %q, %q or %q", s, ModeAligned, ModeUnaligned, ModeAtLeastOnce)
}

// RestartSettings say how a failed job restarts (plan field "restart").
type RestartSettings struct {
	// Strategy: "none", "fixed-delay" or "exponential-backoff".
	Strategy string `json:"strategy"`
	// Attempts is the most restarts before the job fails for good
	// (0 with a strategy other than none: unlimited).
	Attempts int `json:"attempts,omitempty"`
	// Delay before a restart, ms (the first one, for exponential backoff).
	Delay int64 `json:"delay,omitempty"`
	// MaxDelay caps exponential backoff, ms.
	MaxDelay int64 `json:"maxDelay,omitempty"`
	// Multiplier of exponential backoff (default 2).
	Multiplier float64 `json:"multiplier,omitempty"`
}

// Restart strategies.
const (
	RestartNone        = "none"
	RestartFixedDelay  = "fixed-delay"
	RestartExponential = "exponential-backoff"
)

// Enabled reports whether checkpointing is on.
func (c *CheckpointSettings) Enabled() bool { return c != nil && c.Interval > 0 }

func (c *CheckpointSettings) validate() error {
	if c == nil {
		return nil
	}
	switch {
	case c.Interval < 0:
		return errorf("checkpoint.interval", "%d must be ≥ 0 (0 disables checkpoints)", c.Interval)
	case c.Mode != "" && !c.Mode.valid():
		return errorf("checkpoint.mode", "%q must be %q, %q or %q", c.Mode, ModeAligned, ModeUnaligned, ModeAtLeastOnce)
	case c.AlignedTimeout < 0:
		return errorf("checkpoint.alignedTimeout", "%d must be ≥ 0", c.AlignedTimeout)
	case c.AlignedTimeout > 0 && c.Mode != "" && c.Mode != ModeAligned:
		return errorf("checkpoint.alignedTimeout", "applies to mode %q only, not %q", ModeAligned, c.Mode)
	case c.Timeout < 0:
		return errorf("checkpoint.timeout", "%d must be ≥ 0", c.Timeout)
	case c.MinPause < 0:
		return errorf("checkpoint.minPause", "%d must be ≥ 0", c.MinPause)
	case c.MaxConcurrent < 0:
		return errorf("checkpoint.maxConcurrent", "%d must be ≥ 0", c.MaxConcurrent)
	case c.TolerableFailures < -1:
		return errorf("checkpoint.tolerableFailures", "%d must be ≥ -1 (-1: unlimited)", c.TolerableFailures)
	case c.Retain < 0:
		return errorf("checkpoint.retain", "%d must be ≥ 0", c.Retain)
	case c.SavepointFormat != "" && c.SavepointFormat != SavepointCanonical && c.SavepointFormat != SavepointNative:
		return errorf("checkpoint.savepointFormat", "%q must be %q or %q", c.SavepointFormat, SavepointCanonical, SavepointNative)
	case c.Compression != nil && (*c.Compression < 0 || *c.Compression > 4):
		return errorf("checkpoint.compression", "%d must be in [0, 4] (0: off)", *c.Compression)
	case c.Storage != "":
		if _, _, err := checkpoint.ParseObjectLocation(c.Storage); err != nil {
			return errorf("checkpoint.storage", "%q: want nats-obj://BUCKET or nats-obj://BUCKET/PREFIX (empty: the data directory)", c.Storage)
		}
	}
	return nil
}

func (r *RestartSettings) validate() error {
	if r == nil {
		return nil
	}
	switch r.Strategy {
	case RestartNone, RestartFixedDelay, RestartExponential:
	default:
		return errorf("restart.strategy", "%q must be %q, %q or %q", r.Strategy, RestartNone, RestartFixedDelay, RestartExponential)
	}
	switch {
	case r.Attempts < 0:
		return errorf("restart.attempts", "%d must be ≥ 0 (0: unlimited)", r.Attempts)
	case r.Delay < 0:
		return errorf("restart.delay", "%d must be ≥ 0", r.Delay)
	case r.MaxDelay < 0:
		return errorf("restart.maxDelay", "%d must be ≥ 0", r.MaxDelay)
	case r.Multiplier != 0 && r.Multiplier < 1:
		return errorf("restart.multiplier", "%g must be ≥ 1", r.Multiplier)
	}
	return nil
}

// DelayBefore returns the delay before restart number attempt (1-based) and
// whether that restart is allowed.
func (r *RestartSettings) DelayBefore(attempt int) (int64, bool) {
	if r == nil || r.Strategy == RestartNone || r.Strategy == "" {
		return 0, false
	}
	if r.Attempts > 0 && attempt > r.Attempts {
		return 0, false
	}
	if r.Strategy == RestartFixedDelay {
		return r.Delay, true
	}
	m := r.Multiplier
	if m == 0 {
		m = 2
	}
	d := float64(r.Delay)
	for i := 1; i < attempt; i++ {
		d *= m
		if r.MaxDelay > 0 && d >= float64(r.MaxDelay) {
			return r.MaxDelay, true
		}
	}
	if r.MaxDelay > 0 && int64(d) > r.MaxDelay {
		return r.MaxDelay, true
	}
	return int64(d), true
}

// String renders the strategy for logs.
func (r *RestartSettings) String() string {
	if r == nil || r.Strategy == "" || r.Strategy == RestartNone {
		return RestartNone
	}
	if r.Strategy == RestartFixedDelay {
		return fmt.Sprintf("%s (attempts %d, delay %dms)", r.Strategy, r.Attempts, r.Delay)
	}
	return fmt.Sprintf("%s (attempts %d, delay %dms, max %dms)", r.Strategy, r.Attempts, r.Delay, r.MaxDelay)
}
