package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/transport"
)

// TestPurgeEndedAttempts: when attempt 2 starts, what attempts 0 and 1 left
// in the job's data stream goes, except the range the checkpoint it
// restores from refers to; attempt 2's own subjects are not touched.
func TestPurgeEndedAttempts(t *testing.T) {
	url, js := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const job = "j1"
	stream, err := js.CreateStream(ctx, transport.DataStreamConfig(job, 1))
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]uint64{}
	for attempt := range 3 {
		for ch := range 2 {
			subj := transport.DataSubject(job, attempt, 0, ch, 0)
			for range 5 {
				ack, err := js.Publish(ctx, subj, []byte("x"))
				if err != nil {
					t.Fatal(err)
				}
				seqs[subj] = append(seqs[subj], ack.Sequence)
			}
		}
	}
	kept := transport.DataSubject(job, 1, 0, 1, 0)
	rng := &checkpoint.ChannelRange{Stream: transport.DataStream(job), Subject: kept, First: seqs[kept][2], Last: seqs[kept][3], Messages: 2}
	keep := &checkpoint.Metadata{ID: 9, Tasks: []checkpoint.SubtaskState{{Channels: []checkpoint.ChannelState{{Input: true, Range: rng}}}}}
	c := &Coordinator{cfg: Config{NATS: nc}}
	if err := c.purgeEndedAttempts(ctx, c.cfg.NATS, job, 2, keep); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(transport.DataSubjects(job)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		kept:                                   3, // from the range's first message on
		transport.DataSubject(job, 2, 0, 0, 0): 5,
		transport.DataSubject(job, 2, 0, 1, 0): 5,
	}
	if len(info.State.Subjects) != len(want) {
		t.Fatalf("subjects left %v, want %v", info.State.Subjects, want)
	}
	for subj, n := range want {
		if info.State.Subjects[subj] != n {
			t.Fatalf("subjects left %v, want %v", info.State.Subjects, want)
		}
	}
	// The kept range reads back whole.
	if err := transport.CheckRange(ctx, js, *rng); err != nil {
		t.Fatal(err)
	}
	// A job without a data stream (one worker) is left alone.
	if err := c.purgeEndedAttempts(ctx, c.cfg.NATS, "other", 3, nil); err != nil {
		t.Fatal(err)
	}
}
