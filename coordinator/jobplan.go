package coordinator

import "github.com/wstream/wstream/job"

// JobPlan returns a copy of the plan job id's current attempt runs, for
// who: the job's configuration in the REST API, and the plan a rescale
// changes the parallelism of.
func (c *Coordinator) JobPlan(who Caller, id string) (*job.Plan, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, err := c.lookupLocked(id, who)
	if err != nil {
		return nil, err
	}
	return j.plan.Clone(), nil
}
