package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/wstream/wstream/abi"
)

// Discard is the "discard" sink: it drops batches and only counts them, for
// benchmarks. Only the batch header is read, so counting costs nothing per
// record. The counters may be read from any goroutine.
//
// With config "rate" (records/s across the sink's subtasks) it is a
// deliberately slow consumer: Write blocks until the batch fits the rate,
// which is how backpressure is exercised and tested.
type Discard struct {
	records atomic.Int64
	batches atomic.Int64
	bytes   atomic.Int64
	rate    float64
	bucket  *tokenBucket
	ctx     context.Context
}

// discardConfig is the configuration of the "discard" sink.
type discardConfig struct {
	Rate float64 `json:"rate"` // records/s across the sink's subtasks; 0 = unpaced
}

func parseDiscardConfig(raw json.RawMessage) (discardConfig, error) {
	var c discardConfig
	if err := decodeConfig("discard", raw, &c); err != nil {
		return c, err
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return c, &ConfigError{Connector: "discard", Field: "rate", Message: fmt.Sprintf("%g must be a finite number ≥ 0", c.Rate)}
	}
	return c, nil
}

func (discardConfig) Connector() string { return "discard" }

// Reach is empty: discard keeps nothing.
func (discardConfig) Reach() []Reach { return nil }

func (c discardConfig) sink(io.Writer) (Sink, error) { return &Discard{rate: c.Rate}, nil }

// Open checks its arguments and starts pacing when a rate is set.
func (d *Discard) Open(ctx context.Context, subtask, parallelism int) error {
	if err := checkSubtask("connector discard", subtask, parallelism); err != nil {
		return err
	}
	if d.rate > 0 {
		d.bucket = newTokenBucket(d.rate / float64(parallelism))
		d.ctx = ctx
	}
	return nil
}

// pace blocks until n records fit the rate, or the job ends.
func (d *Discard) pace(n int64) error {
	for n > 0 {
		got, wait := d.bucket.take(time.Now(), n)
		n -= got
		if wait == 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
			return d.ctx.Err()
		}
	}
	return nil
}

// Write counts batch.
func (d *Discard) Write(batch []byte) error {
	if len(batch) < abi.BatchHeaderSize {
		return fmt.Errorf("connector discard: write: %w: %d bytes is shorter than the header", abi.ErrMalformedBatch, len(batch))
	}
	if d.bucket != nil {
		if err := d.pace(int64(abi.Count(batch))); err != nil {
			return fmt.Errorf("connector discard: write: %w", err)
		}
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
