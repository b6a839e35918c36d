package coordinator

import "github.com/wstream/wstream/checkpoint"

// registry counts references to shared state files (incremental
// checkpoints upload an SST file once and reference it from every later
// checkpoint that still has it) and deletes a file when no retained
// checkpoint, and no pending one, references it any more (seed 000 §4.2,
// SharedStateRegistry). A pending checkpoint's references are known only
// from its acks, and a subtask reuses any shared file it finds in storage
// (PutShared), so while any checkpoint is pending a file freed by a
// discard may be referenced by an ack still to come: such files are left
// to the sweep, which runs once nothing is pending (deletable).
type registry struct {
	refs      map[string]int
	pending   map[int64][]string // checkpoint id → shared paths its acks reference
	completed map[int64][]string // retained checkpoint id → shared paths
}

func newRegistry() *registry {
	return &registry{refs: map[string]int{}, pending: map[int64][]string{}, completed: map[int64][]string{}}
}

func sharedPaths(st checkpoint.SubtaskState) []string {
	var out []string
	for _, f := range st.State {
		if f.Shared {
			out = append(out, f.Path)
		}
	}
	return out
}

func (r *registry) acked(id int64, st checkpoint.SubtaskState) {
	for _, p := range sharedPaths(st) {
		r.refs[p]++
		r.pending[id] = append(r.pending[id], p)
	}
}

func (r *registry) completedCheckpoint(id int64) {
	r.completed[id] = r.pending[id]
	delete(r.pending, id)
}

// release drops the references of an aborted or discarded checkpoint and
// returns the files nothing references any more.
func (r *registry) release(id int64) []string {
	paths := r.pending[id]
	delete(r.pending, id)
	paths = append(paths, r.completed[id]...)
	delete(r.completed, id)
	var free []string
	for _, p := range paths {
		r.refs[p]--
		if r.refs[p] <= 0 {
			delete(r.refs, p)
			free = append(free, p)
		}
	}
	return free
}

// deletable returns the files of free (released by a discard) that may be
// deleted now: all of them when no checkpoint is pending, none otherwise.
func (r *registry) deletable(free []string, pending int) []string {
	if pending > 0 {
		return nil
	}
	return free
}
