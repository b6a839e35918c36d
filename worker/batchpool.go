package worker

import "sync"

// Batches sent over local channels are recycled: a subtask that routes a
// flood of output would otherwise allocate a new 32 KiB batch per cut, and
// the garbage collection of them all slows every goroutine of the process,
// other tenants' included.
//
// A batch goes back to the pool only where nothing can still hold it: its
// consumer took it from a local channel (a JetStream channel's data is the
// NATS client's), has processed it (operators and sinks retain no batch
// they are given, connector.Sink and operator.Operator say so), and its job
// takes no unaligned checkpoints, which keep overtaken and blocked batches
// as channel state and send them again later (an aligned checkpoint whose
// alignment may time out becomes unaligned, so it counts as one).
var batchPool sync.Pool

// Batches whose capacity lies outside [minPooled, maxPooled] are left to the
// collector: a cut batch is about flushBytes, and a larger one comes from a
// large record.
const (
	minPooled = flushBytes
	maxPooled = 2 * flushBytes
)

// newBatch returns an empty batch with room for n bytes, from the pool when
// it has one large enough.
func newBatch(n int) []byte {
	if n <= maxPooled {
		if p, ok := batchPool.Get().(*[]byte); ok {
			if cap(*p) >= n {
				return (*p)[:0]
			}
		}
		return make([]byte, 0, max(n, flushBytes+flushBytes/4))
	}
	return make([]byte, 0, n)
}

// recycleBatch gives b back to the pool; nothing may use it afterwards.
func recycleBatch(b []byte) {
	if c := cap(b); c < minPooled || c > maxPooled {
		return
	}
	b = b[:0]
	batchPool.Put(&b)
}
