package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/wstream/wstream/abi"
)

// Discard is the "discard" sink: it drops batches and only counts them, for
// benchmarks. Only the batch header is read, so counting costs nothing per
// record. The counters may be read from any goroutine.
type Discard struct {
	records atomic.Int64
	batches atomic.Int64
	bytes   atomic.Int64
}

func newDiscardSink(raw json.RawMessage, _ io.Writer) (Sink, error) {
	var c struct{}
	if err := decodeConfig("discard", raw, &c); err != nil {
		return nil, err
	}
	return &Discard{}, nil
}

// Open checks its arguments only.
func (d *Discard) Open(_ context.Context, subtask, parallelism int) error {
	return checkSubtask("connector discard", subtask, parallelism)
}

// Write counts batch.
func (d *Discard) Write(batch []byte) error {
	if len(batch) < abi.BatchHeaderSize {
		return fmt.Errorf("connector discard: write: %w: %d bytes is shorter than the header", abi.ErrMalformedBatch, len(batch))
	}
	d.records.Add(int64(abi.Count(batch)))
	d.batches.Add(1)
	d.bytes.Add(int64(len(batch)))
	return nil
}

// Close does nothing.
func (d *Discard) Close() error { return nil }

// Records is the number of records written so far.
func (d *Discard) Records() int64 { return d.records.Load() }

// Batches is the number of batches written so far.
func (d *Discard) Batches() int64 { return d.batches.Load() }

// Bytes is the number of encoded batch bytes written so far.
func (d *Discard) Bytes() int64 { return d.bytes.Load() }
