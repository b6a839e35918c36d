package coordinator

import (
	"testing"

	"github.com/wstream/wstream/lifecycle"
	"github.com/wstream/wstream/transport"
)

// TestStateMapping: every ended lifecycle result maps to its result state,
// and every status name of an ended job to the same state its result
// carries; a job still going has none.
func TestStateMapping(t *testing.T) {
	for _, c := range []struct {
		res  lifecycle.Result
		want string
	}{
		{lifecycle.Result{State: lifecycle.Failed, Error: "x"}, transport.JobFailed},
		{lifecycle.Result{State: lifecycle.Finished}, transport.JobFinished},
		{lifecycle.Result{State: lifecycle.Finished, Stopped: true}, transport.JobStopped},
		{lifecycle.Result{State: lifecycle.Canceled}, transport.JobCanceled},
	} {
		if got := ResultState(c.res); got != c.want {
			t.Errorf("ResultState(%+v) = %q, want %q", c.res, got, c.want)
		}
		if c.res.Stopped {
			continue
		}
		if got := StatusResultState(c.res.State.String()); got != c.want {
			t.Errorf("StatusResultState(%s) = %q, want %q", c.res.State, got, c.want)
		}
	}
	if got := StatusResultState(lifecycle.Suspended.String()); got != transport.JobStopped {
		t.Errorf("StatusResultState(SUSPENDED) = %q", got)
	}
	for _, s := range []lifecycle.State{lifecycle.Created, lifecycle.Running, lifecycle.Failing, lifecycle.Restarting, lifecycle.Cancelling} {
		if got := StatusResultState(s.String()); got != "" {
			t.Errorf("StatusResultState(%s) = %q, want none", s, got)
		}
	}
}
