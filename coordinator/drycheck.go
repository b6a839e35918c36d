package coordinator

import "github.com/wstream/wstream/job"

// CheckSavepoint checks, as a submission does, that plan can start from
// the savepoint or retained checkpoint in dir (a directory, or an object
// store location reached through no connection: an error): for a dry run.
func CheckSavepoint(dir string, plan *job.Plan, allowNonRestored bool) error {
	_, _, err := checkSavepoint(dir, plan, allowNonRestored, nil)
	return err
}
