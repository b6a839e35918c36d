package api

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/wstream/wstream/transport"
)

// Statuses of a savepoint request.
const (
	StatusInProgress = "IN_PROGRESS"
	StatusCompleted  = "COMPLETED"
	StatusFailed     = "FAILED"
)

// SavepointStatus is a savepoint or stop request made through the API, as
// GET /v1/jobs/{id}/savepoints/{request} shows it, and what `wstream
// savepoint|stop -o json` print (without a request id: the CLI's request
// is its own). Times are Unix ms; EndTime is null while in progress.
type SavepointStatus struct {
	RequestID string `json:"requestId,omitempty"`
	JobID     string `json:"jobId"`
	// Kind is "savepoint" or "stop" (stop with savepoint).
	Kind   string `json:"kind"`
	Status string `json:"status"`
	// SavepointID and Location say what completed; Error why it failed.
	SavepointID int64  `json:"savepointId,omitempty"`
	Location    string `json:"location,omitempty"`
	Error       string `json:"error,omitempty"`
	RequestedAt int64  `json:"requestedAt"`
	EndTime     *int64 `json:"endTime"`
}

// savepoints holds the API's savepoint requests: those in progress, and
// the latest finished ones (maxFinished), for their clients to poll.
type savepoints struct {
	mu   sync.Mutex
	reqs []*SavepointStatus // oldest first
}

const maxFinished = 100

func newSavepoints() *savepoints { return &savepoints{} }

func (s *savepoints) start(jobID string, stop bool) *SavepointStatus {
	var b [8]byte
	_, _ = rand.Read(b[:])
	kind := "savepoint"
	if stop {
		kind = "stop"
	}
	r := &SavepointStatus{RequestID: hex.EncodeToString(b[:]), JobID: jobID, Kind: kind, Status: StatusInProgress,
		RequestedAt: time.Now().UnixMilli()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
	finished := 0
	for _, q := range s.reqs {
		if q.Status != StatusInProgress {
			finished++
		}
	}
	if finished > maxFinished {
		// Forget the oldest finished request.
		for i, q := range s.reqs {
			if q.Status != StatusInProgress {
				s.reqs = slices.Delete(s.reqs, i, i+1)
				break
			}
		}
	}
	return r
}

func (s *savepoints) finish(r *SavepointStatus, rep transport.SavepointReply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixMilli()
	r.EndTime = &now
	if rep.Error != "" {
		r.Status, r.Error = StatusFailed, rep.Error
		return
	}
	r.Status, r.SavepointID, r.Location = StatusCompleted, rep.ID, rep.Dir
}

func (s *savepoints) drop(r *SavepointStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = slices.DeleteFunc(s.reqs, func(q *SavepointStatus) bool { return q == r })
}

func (s *savepoints) snapshot(r *SavepointStatus) SavepointStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *r
}

// get returns request id of job jobID; the caller has been checked to see
// the job.
func (s *savepoints) get(jobID, id string) (SavepointStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reqs {
		if r.RequestID == id && r.JobID == jobID {
			return *r, true
		}
	}
	return SavepointStatus{}, false
}

// list returns the requests for job jobID, newest first.
func (s *savepoints) list(jobID string) []SavepointStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []SavepointStatus{}
	for i := len(s.reqs) - 1; i >= 0; i-- {
		if s.reqs[i].JobID == jobID {
			out = append(out, *s.reqs[i])
		}
	}
	return out
}
