package worker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// offsetSource is a source whose position cannot be read while failOffset
// is set.
type offsetSource struct{ failOffset bool }

func (s *offsetSource) Open(context.Context, int, int) error { return nil }
func (s *offsetSource) Next(context.Context, *abi.Builder, int) (int64, bool, error) {
	return abi.MinWatermark, false, nil
}
func (s *offsetSource) Close() error { return nil }
func (s *offsetSource) Offset() ([]byte, error) {
	if s.failOffset {
		return nil, errors.New("position unreadable")
	}
	return []byte("pos"), nil
}
func (s *offsetSource) Seek([]byte) error { return nil }

// TestSyncPhaseFailureDeclines: a failure in the synchronous phase of a
// snapshot (here, reading the source's position) declines the checkpoint
// instead of failing the subtask. The barrier went downstream before the
// synchronous phase (seed 003: broadcast the barrier, then snapshot); the
// cancel marker overtakes it there, so downstream drops the checkpoint and
// then finds its barrier stale. The next checkpoint succeeds.
func TestSyncPhaseFailureDeclines(t *testing.T) {
	st, err := checkpoint.OpenStorage(filepath.Join(t.TempDir(), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan transport.CheckpointAck, 8)
	src := &offsetSource{failOffset: true}
	out := transport.NewLocalChannel(8)
	tk := &task{
		id: checkpoint.TaskID{Chain: 0, Subtask: 0}, label: "src/0", now: time.Now, wm: abi.MinWatermark,
		chain:  &job.Chain{Vertices: []*job.Vertex{{ID: "src", Kind: job.KindSource, Connector: "test"}}},
		source: src,
		ckpt: &ckptEnv{storage: st, mode: checkpoint.ExactlyOnce, tmpDir: t.TempDir(),
			publish: func(a transport.CheckpointAck) { acks <- a }},
		mbox: newMailbox(), triggerTS: map[int64]int64{},
		outs: []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionForward}, peers: []int{0},
			chans: []transport.OutputChannel{out}, bufs: make([]abi.Builder, 1), maxPar: 128}},
	}
	if err := tk.ensureMachine(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	trigger := func(id int64) error {
		return tk.runControl(ctx, control{action: transport.CheckpointTrigger, id: id, kind: checkpoint.KindCheckpoint, timestamp: time.Now().UnixMilli()})
	}
	if err := trigger(1); err != nil {
		t.Fatalf("a failed synchronous phase fails the subtask: %v", err)
	}
	select {
	case a := <-acks:
		if a.ID != 1 || !strings.Contains(a.Decline, "position unreadable") {
			t.Fatalf("ack %+v, want a decline of checkpoint 1 naming the failure", a)
		}
	default:
		t.Fatal("no decline of checkpoint 1")
	}
	var got []string
	for len(got) < 2 {
		m, ok := out.TryRecv()
		if !ok {
			t.Fatalf("downstream got %v, want the cancel marker and the barrier", got)
		}
		got = append(got, m.Kind.String())
		if m.Checkpoint != 1 {
			t.Fatalf("%v of checkpoint %d, want 1", m.Kind, m.Checkpoint)
		}
	}
	if got[0] != transport.KindCancel.String() || got[1] != transport.KindBarrier.String() {
		t.Fatalf("downstream got %v, want the cancel marker ahead of the barrier", got)
	}

	// The next checkpoint is taken and acknowledged.
	src.failOffset = false
	if err := trigger(2); err != nil {
		t.Fatal(err)
	}
	tk.asyncWG.Wait()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case a := <-acks:
			if a.ID != 2 {
				t.Fatalf("ack %+v, want checkpoint 2's", a)
			}
			if a.Decline != "" {
				t.Fatalf("checkpoint 2 declined: %s", a.Decline)
			}
			return
		case <-deadline:
			t.Fatal("no ack of checkpoint 2")
		}
	}
}

// TestAlignedTimeoutSwitchesWithoutInput: an aligned checkpoint whose
// alignment outlives the aligned timeout switches to unaligned when the
// gate's timer wakes the subtask, with no input arriving: the barrier goes
// downstream before the late channel delivers its own, the data that
// channel delivers before its barrier is channel state, and the ack says
// the snapshot was unaligned.
func TestAlignedTimeoutSwitchesWithoutInput(t *testing.T) {
	st, err := checkpoint.OpenStorage(filepath.Join(t.TempDir(), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan transport.CheckpointAck, 8)
	a, b := transport.NewLocalChannel(8), transport.NewLocalChannel(8)
	out := transport.NewLocalChannel(64)
	tk := &task{
		id: checkpoint.TaskID{Chain: 1, Subtask: 0}, label: "op/0", now: time.Now, wm: abi.MinWatermark,
		chain: &job.Chain{Vertices: []*job.Vertex{{ID: "op"}}},
		ckpt: &ckptEnv{storage: st, mode: checkpoint.ExactlyOnce, alignedTimeout: 50, tmpDir: t.TempDir(),
			publish: func(a transport.CheckpointAck) { acks <- a }},
		mbox: newMailbox(), triggerTS: map[int64]int64{},
		gate:   transport.NewInputGate([]transport.InputChannel{a, b}),
		inputs: []inputRef{{edge: 0, peer: 0}, {edge: 0, peer: 1}},
		outs: []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionForward}, peers: []int{0},
			chans: []transport.OutputChannel{out}, bufs: make([]abi.Builder, 1), maxPar: 128}},
	}
	tk.mbox.poke = tk.gate.Interrupt
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tk.runGate(ctx) }()

	barrier := transport.Message{Kind: transport.KindBarrier, Checkpoint: 1,
		CheckpointKind: uint8(checkpoint.KindCheckpoint), Timestamp: time.Now().UnixMilli()}
	if err := a.Send(ctx, barrier); err != nil {
		t.Fatal(err)
	}
	// Nothing more arrives: only the timer can make the subtask forward
	// the barrier.
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, ok := out.TryRecv()
		if ok {
			if m.Kind != transport.KindBarrier || m.Checkpoint != 1 {
				t.Fatalf("downstream got %v of %d, want barrier 1", m.Kind, m.Checkpoint)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the barrier was not forwarded after the aligned timeout")
		}
		time.Sleep(5 * time.Millisecond) // polling, with the deadline above
	}
	var rec abi.Builder
	rec.Add(0, 0, nil, []byte("late"))
	if err := b.Send(ctx, transport.Message{Kind: transport.KindData, Data: rec.Bytes()}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, barrier); err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-acks:
		if ack.ID != 1 || ack.Decline != "" || !ack.Metrics.Unaligned {
			t.Fatalf("ack %+v, want an unaligned snapshot of checkpoint 1", ack)
		}
		if ack.State == nil || len(ack.State.Channels) != 1 {
			t.Fatalf("channel state %+v, want the late channel's data", ack.State)
		}
	case err := <-done:
		t.Fatalf("the subtask ended: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("no ack of checkpoint 1")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("runGate: %v", err)
	}
}
