package coordinator

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/transport"
)

// purgeEndedAttempts removes from a job's data stream what its attempts
// before `before` left there, except the sequence ranges that the
// checkpoint the new attempt restores from refers to (keep; nil when it
// restores none). The stream lives for the job, across attempts, so that
// a restore can read those ranges back; everything else of an ended
// attempt is dead weight on the server's disk. A job on one worker has no
// data stream: nothing to do.
func (c *Coordinator) purgeEndedAttempts(ctx context.Context, nc *nats.Conn, job string, before int, keep *checkpoint.Metadata) error {
	if before <= 0 {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := js.Stream(ctx, transport.DataStream(job))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// From the first sequence of the kept range on, a subject is left as it
	// is: the restore reads the range, and the attempts after it use
	// subjects of their own.
	first := map[string]uint64{}
	if keep != nil {
		for _, t := range keep.Tasks {
			for _, ch := range t.Channels {
				if r := ch.Range; r != nil && r.Stream == transport.DataStream(job) {
					if f, ok := first[r.Subject]; !ok || r.First < f {
						first[r.Subject] = r.First
					}
				}
			}
		}
	}
	for a := 0; a < before; a++ {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("wstream.data."+job+"."+strconv.Itoa(a)+".>"))
		if err != nil {
			return err
		}
		for subj := range info.State.Subjects {
			opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(subj)}
			if f, ok := first[subj]; ok {
				opts = append(opts, jetstream.WithPurgeSequence(f))
			}
			if err := stream.Purge(ctx, opts...); err != nil {
				return err
			}
		}
	}
	return nil
}
