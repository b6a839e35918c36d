package lifecycle

import (
	"fmt"
	"strings"
)

// Action is work a Job hands to its driver through Ready: one of Deploy,
// CancelAttempt, StartCheckpoints, HoldCheckpoints, StopCheckpoints, ReleaseSlots,
// ScheduleRestart, DropDataStream, PersistSpec, PublishResult and
// UpgradeEnded.
type Action interface {
	fmt.Stringer
	action()
}

// Restore says what an attempt restores its state from.
type Restore int

const (
	// RestoreNone: nothing, the first attempt of a new job.
	RestoreNone Restore = iota
	// RestoreSavepoint: the savepoint the job was started from (its first
	// attempt).
	RestoreSavepoint
	// RestoreLatest: the latest usable completed checkpoint; without one
	// the savepoint the job started from, or nothing.
	RestoreLatest
	// RestoreUpgrade: the savepoint of the upgrade under way (or just
	// rolled back), at whose barrier the previous attempt stopped.
	RestoreUpgrade
)

func (r Restore) String() string {
	switch r {
	case RestoreSavepoint:
		return "savepoint"
	case RestoreLatest:
		return "latest checkpoint"
	case RestoreUpgrade:
		return "upgrade savepoint"
	}
	return "nothing"
}

// Module says which module and plan an attempt runs during an upgrade.
type Module int

const (
	// ModuleCurrent: the one the job runs (no upgrade under way).
	ModuleCurrent Module = iota
	// ModuleNew: the upgrade's new module and plan.
	ModuleNew
	// ModuleOld: the module and plan the job ran before the upgrade (it
	// was rolled back).
	ModuleOld
)

func (m Module) String() string {
	switch m {
	case ModuleNew:
		return "new module"
	case ModuleOld:
		return "old module"
	}
	return "current module"
}

// UpgradeOutcome is how an upgrade ended.
type UpgradeOutcome int

const (
	// UpgradeDone: the new module runs and took over for good (its first
	// checkpoint completed, or the job finished on it).
	UpgradeDone UpgradeOutcome = iota + 1
	// UpgradeRolledBack: the new module's attempt failed before its first
	// checkpoint (a restore, a migration, a deployment, a subtask): the old
	// module runs again from the same savepoint.
	UpgradeRolledBack
	// UpgradeAborted: the upgrade's savepoint failed, or the job failed,
	// finished or was cancelled before the upgrade could be done; the old
	// module goes on (or the job ended).
	UpgradeAborted
)

func (o UpgradeOutcome) String() string {
	switch o {
	case UpgradeDone:
		return "done"
	case UpgradeRolledBack:
		return "rolled back"
	case UpgradeAborted:
		return "aborted"
	}
	return fmt.Sprintf("UpgradeOutcome(%d)", int(o))
}

// Deploy asks the driver to place attempt Attempt's subtasks, report
// Placed, send every worker its part, and report Deployed or DeployFailed.
type Deploy struct {
	Attempt int
	Restore Restore
	// Module is the module and plan the attempt runs.
	Module Module
	// Restartable says a failure of this attempt would be followed by a
	// restart: sinks keep their files for recovery instead of aborting.
	Restartable bool
}

// CancelAttempt asks the driver to tell Workers to cancel their subtasks
// of Attempt. Failed says the attempt failed: sinks abort (or keep their
// files for the restart) instead of flushing.
type CancelAttempt struct {
	Attempt int
	Workers []string
	Failed  bool
}

// StartCheckpoints starts the periodic checkpoints of Attempt.
type StartCheckpoints struct{ Attempt int }

// HoldCheckpoints tells the checkpoint driver of Attempt that the attempt
// is doomed (failing, restarting or being cancelled): it triggers no
// checkpoint or savepoint any more, while pending checkpoints that the
// subtasks acknowledge may still complete until StopCheckpoints.
type HoldCheckpoints struct{ Attempt int }

// StopCheckpoints stops the checkpoint driver of Attempt: pending
// checkpoints are aborted and nothing more is triggered.
type StopCheckpoints struct{ Attempt int }

// ReleaseSlots gives back the slots Attempt's subtasks held (a lost
// worker's went with it).
type ReleaseSlots struct{ Attempt int }

// ScheduleRestart asks for a Tick at or after At, when restart number
// Restart deploys Attempt. Cause is why.
type ScheduleRestart struct {
	Attempt int
	Restart int
	At      int64
	Cause   string
}

// DropDataStream removes the job's data stream. It outlives attempts (a
// checkpoint may refer to ranges of it) and goes with the job.
type DropDataStream struct{}

// PersistSpec stores the job's spec and record as they stand (state,
// attempt, restarts and their causes, the result once there is one), so
// that a coordinator that starts later resumes or reports the job.
type PersistSpec struct {
	State    State
	Attempt  int
	Restarts int
}

// PublishResult announces the job's end.
type PublishResult struct{ Result Result }

// UpgradeEnded says how the upgrade requested with UpgradeRequested ended:
// the driver answers the client that asked and records it. Attempt is the
// attempt that runs (or is deployed next) afterwards; Savepoint the id of
// the upgrade's savepoint (0 when it never completed); Cause why an
// upgrade was rolled back or aborted.
type UpgradeEnded struct {
	Attempt   int
	Outcome   UpgradeOutcome
	Savepoint int64
	Cause     string
}

// Result is how a job ended.
type Result struct {
	// State is FINISHED, FAILED or CANCELED.
	State State
	// Stopped says a FINISHED job was stopped with a savepoint (Savepoint:
	// its id, when known) rather than finished by its input's end.
	Stopped   bool
	Savepoint int64
	// Error says why a FAILED job failed.
	Error    string
	Restarts int
}

func (Deploy) action()           {}
func (CancelAttempt) action()    {}
func (StartCheckpoints) action() {}
func (HoldCheckpoints) action()  {}
func (StopCheckpoints) action()  {}
func (ReleaseSlots) action()     {}
func (ScheduleRestart) action()  {}
func (DropDataStream) action()   {}
func (PersistSpec) action()      {}
func (PublishResult) action()    {}
func (UpgradeEnded) action()     {}

func (a Deploy) String() string {
	s := fmt.Sprintf("deploy attempt %d (restore: %s", a.Attempt, a.Restore)
	if a.Module != ModuleCurrent {
		s += ", " + a.Module.String()
	}
	if a.Restartable {
		s += ", restartable"
	}
	return s + ")"
}

func (a CancelAttempt) String() string {
	why := "canceled"
	if a.Failed {
		why = "failed"
	}
	return fmt.Sprintf("cancel attempt %d on %s (%s)", a.Attempt, strings.Join(a.Workers, ","), why)
}

func (a StartCheckpoints) String() string {
	return fmt.Sprintf("start-checkpoints attempt %d", a.Attempt)
}

func (a HoldCheckpoints) String() string {
	return fmt.Sprintf("hold-checkpoints attempt %d", a.Attempt)
}

func (a StopCheckpoints) String() string {
	return fmt.Sprintf("stop-checkpoints attempt %d", a.Attempt)
}

func (a ReleaseSlots) String() string { return fmt.Sprintf("release-slots attempt %d", a.Attempt) }

func (a ScheduleRestart) String() string {
	return fmt.Sprintf("schedule-restart %d (attempt %d) at %d: %s", a.Restart, a.Attempt, a.At, a.Cause)
}

func (DropDataStream) String() string { return "drop-data-stream" }

func (a PersistSpec) String() string {
	return fmt.Sprintf("persist-spec %s attempt %d restarts %d", a.State, a.Attempt, a.Restarts)
}

func (a PublishResult) String() string { return "publish-result " + a.Result.String() }

func (a UpgradeEnded) String() string {
	s := fmt.Sprintf("upgrade-ended %s (attempt %d, savepoint %d)", a.Outcome, a.Attempt, a.Savepoint)
	if a.Cause != "" {
		s += ": " + a.Cause
	}
	return s
}

func (r Result) String() string {
	s := r.State.String()
	switch {
	case r.Stopped && r.Savepoint != 0:
		s += fmt.Sprintf(" (stopped with savepoint %d)", r.Savepoint)
	case r.Stopped:
		s += " (stopped with a savepoint)"
	}
	if r.Error != "" {
		s += ": " + r.Error
	}
	return s
}
