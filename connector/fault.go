package connector

// SetPreCommitFault installs fault in s, a transactional file or JetStream
// sink: each PreCommit that has a transaction to end calls it once its
// work is done (the pending file renamed and synced, the object stored)
// and fails with the error it returns, as a pre-commit whose reply was
// lost does. It is for tests of what a failed pre-commit leaves behind,
// and reports whether s takes the hook. Call it before Open.
func SetPreCommitFault(s Sink, fault func(id int64) error) bool {
	switch s := s.(type) {
	case *fileSink:
		if s.txn == nil {
			return false
		}
		s.txn.fault = fault
		return true
	case *jsSink:
		s.mu.Lock()
		defer s.mu.Unlock()
		s.fault = fault
		return true
	}
	return false
}
