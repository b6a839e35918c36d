package main

import (
	"fmt"
	"io"
	"time"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
)

// showRestoreProgress prints, on a terminal, how far the restore of a job
// started from a savepoint or resumed from a checkpoint has got: the bytes
// verified and then read, the rate and the time left. It stops by itself
// once every byte has been read, or when stop is called; it prints nothing
// when w is not a terminal or the job restores nothing.
func showRestoreProgress(w io.Writer, dataDir string, d *engine.Deployment) (stop func()) {
	if !isTerminal(w) {
		return func() {}
	}
	total := restoreSize(dataDir, d)
	if total == 0 {
		return func() {}
	}
	return restoreProgress(w, total, 500*time.Millisecond)
}

// restoreProgress prints a progress line every interval until total stored
// bytes have been verified and read again, or until stopped.
func restoreProgress(w io.Writer, total int64, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	v0, r0 := checkpoint.ReadProgress()
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTicker(interval)
		defer t.Stop()
		printed := false
		defer func() {
			if printed {
				fmt.Fprint(w, "\r\033[K")
			}
		}()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			v, r := checkpoint.ReadProgress()
			v, r = v-v0, r-r0
			// Restores verify every file before they read it again, so the
			// work is twice the size.
			n := min(v, total) + min(r, total)
			if r >= total {
				return
			}
			phase, at := "verifying", v
			if v >= total {
				phase, at = "restoring", r
			}
			rate := float64(n) / time.Since(start).Seconds()
			line := fmt.Sprintf("restore: %s %s of %s, %s/s", phase, mb(at), mb(total), mb(int64(rate)))
			if rate > 1<<16 {
				line += fmt.Sprintf(", ETA %.0fs", float64(2*total-n)/rate)
			}
			fmt.Fprintf(w, "\r\033[K%s", line)
			printed = true
		}
	}()
	return func() {
		select {
		case <-done:
		default:
			close(done)
		}
		<-finished
	}
}

// restoreSize is the stored size of the state a deployment restores: every
// file of the savepoint or of the checkpoint a resumed job continues from
// (0 when it restores nothing or the size is unknown).
func restoreSize(dataDir string, d *engine.Deployment) int64 {
	var m *checkpoint.Metadata
	switch {
	case d.FromSavepoint != "":
		_, sm, err := checkpoint.OpenRestorePoint(d.FromSavepoint)
		if err != nil {
			return 0
		}
		m = sm
	case d.Resume != "" && (d.Plan.Checkpoint == nil || d.Plan.Checkpoint.Storage == ""):
		st, err := checkpoint.OpenStorage(coordinator.CheckpointRoot(dataDir, d.Resume))
		if err != nil {
			return 0
		}
		lm, _, err := st.LatestUsable()
		if err != nil || lm == nil {
			return 0
		}
		m = lm
	default:
		return 0
	}
	var n int64
	for _, t := range m.Tasks {
		for _, f := range t.State {
			n += f.Size
		}
	}
	return n
}
