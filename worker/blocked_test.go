package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator/builtin"
	"github.com/wstream/wstream/subtask"
	"github.com/wstream/wstream/transport"
)

// blockedTask is a subtask of two chained identity stages whose only output
// is a local channel of capacity 1, already full: its next send blocks until
// the test reads. It takes unaligned checkpoints.
func blockedTask(t *testing.T) (*task, *transport.LocalChannel, chan transport.CheckpointAck) {
	t.Helper()
	st, err := checkpoint.OpenStorage(filepath.Join(t.TempDir(), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan transport.CheckpointAck, 4)
	tk := &task{
		id: checkpoint.TaskID{Chain: 0, Subtask: 0}, label: "split/0", now: time.Now,
		ckpt: &ckptEnv{storage: st, mode: checkpoint.Unaligned, tmpDir: t.TempDir(),
			publish: func(a transport.CheckpointAck) { acks <- a }},
		mbox: newMailbox(), prio: make(chan struct{}, 1),
		triggerTS: map[int64]int64{},
	}
	tk.mbox.prio = tk.prio
	for _, id := range []string{"a", "b"} {
		op, err := builtin.New("identity")
		if err != nil {
			t.Fatal(err)
		}
		tk.stages = append(tk.stages, &stage{vertex: &job.Vertex{ID: id}, op: op,
			coll: stageCollector{nOut: 1, keep: -1}})
	}
	tk.stages[0].coll.keep = 0
	ch := transport.NewLocalChannel(1)
	tk.outs = []*outEdge{{edge: &job.ChainEdge{Partition: job.PartitionForward}, peers: []int{0},
		chans: []transport.OutputChannel{ch}, bufs: make([]abi.Builder, 1), maxPar: 128}}
	if err := ch.Send(context.Background(), transport.Message{Kind: transport.KindWatermark}); err != nil {
		t.Fatal(err)
	}
	return tk, ch, acks
}

// TestSnapshotWhileBlockedDeliversOnce pins the cause of unaligned
// checkpoints counting records twice: a checkpoint taken while a send waits
// for room drains every stage, and the stage whose batch was still on its way
// down the chain handed that batch on a second time.
//
// The chain's last stage either collects its output and hands it on after
// the call, or (as the worker runs it, "routed") routes each record into
// the channel buffers as it is emitted.
func TestSnapshotWhileBlockedDeliversOnce(t *testing.T) {
	for _, routed := range []bool{false, true} {
		t.Run(fmt.Sprintf("routed=%t", routed), func(t *testing.T) { snapshotWhileBlocked(t, routed) })
	}
}

func snapshotWhileBlocked(t *testing.T, routed bool) {
	tk, ch, acks := blockedTask(t)
	if routed {
		tk.stages[1].coll.tail = tk
	}
	// Large enough that the chain's end sends while routing it (flushBytes).
	const n = 2000
	var in abi.Builder
	for i := range n {
		in.Add(0, 0, nil, fmt.Appendf(nil, "record %06d %s", i, "................................"))
	}
	if in.Size() < flushBytes {
		t.Fatalf("input batch of %d bytes does not reach flushBytes", in.Size())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := tk.deliver(ctx, 0, in.Bytes())
		if err == nil {
			err = tk.flush(ctx)
		}
		done <- err
	}()
	// The trigger reaches the subtask while its send is blocked: it
	// snapshots there (a source does, and so does a subtask whose input
	// barrier overtook the queue).
	tk.mbox.put(control{action: transport.CheckpointTrigger, id: 1, kind: checkpoint.KindCheckpoint, timestamp: time.Now().UnixMilli()})
	var ack transport.CheckpointAck
	select {
	case ack = <-acks:
	case err := <-done:
		t.Fatalf("the batch was delivered (err %v) before the checkpoint ran: the send did not block", err)
	case <-ctx.Done():
		t.Fatal("no acknowledgement of checkpoint 1 while the send was blocked")
	}
	if ack.Decline != "" || ack.ID != 1 {
		t.Fatalf("ack = %+v, want checkpoint 1 acknowledged", ack)
	}

	// Read the channel while the subtask finishes.
	seen := map[string]int{}
	var order []transport.Kind
	for {
		m, ok := ch.TryRecv()
		if !ok {
			if done == nil {
				break // finished, and everything read
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				done = nil
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				t.Fatal("the subtask did not finish its send")
			}
			continue
		}
		order = append(order, m.Kind)
		if m.Kind != transport.KindData {
			continue
		}
		rd, err := abi.NewReader(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var r abi.Record
		for {
			ok, err := rd.Next(&r)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			seen[string(r.Value)]++
		}
	}
	if order[0] != transport.KindBarrier {
		t.Fatalf("channel order %v: the unaligned barrier did not overtake the queue", order)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct records arrived, want %d", len(seen), n)
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("record %q arrived %d times", v, c)
		}
	}
	// What the barrier overtook, and the rest of the blocked output, is the
	// checkpoint's output channel state: every record once.
	var captured int64
	for _, c := range ack.State.Channels {
		if c.Input {
			t.Fatalf("input channel state %+v in a subtask without inputs", c)
		}
		captured += c.Bytes
	}
	// The output leaves in batches of about flushBytes, each with its own
	// header: the records' bytes once, and a header per batch.
	extra := captured - int64(in.Size()-abi.BatchHeaderSize)
	if most := int64(abi.BatchHeaderSize * (in.Size()/flushBytes + 2)); extra < abi.BatchHeaderSize || extra > most || extra%abi.BatchHeaderSize != 0 {
		t.Fatalf("output channel state holds %d bytes, want the %d bytes of records once plus a header per batch", captured, in.Size()-abi.BatchHeaderSize)
	}
}

// TestDeclineAtOnce: a subtask that drops its part of a checkpoint (here a
// cancel marker from upstream while it captures an unaligned checkpoint's
// input) declines it at once with the reason, so the coordinator aborts it
// without waiting for its timeout; a drop the coordinator asked for (an
// abort) sends no decline.
func TestDeclineAtOnce(t *testing.T) {
	tk, _, acks := blockedTask(t)
	a, b := transport.NewLocalChannel(4), transport.NewLocalChannel(4)
	tk.gate = transport.NewInputGate([]transport.InputChannel{a, b})
	tk.inputs = []inputRef{{edge: 0, peer: 0}, {edge: 0, peer: 1}}
	h, err := subtask.NewMachine(subtask.Config{Channels: 2, Mode: checkpoint.Unaligned})
	if err != nil {
		t.Fatal(err)
	}
	tk.machine = h
	ctx := context.Background()
	barrier := func(id int64) transport.Message {
		return transport.Message{Kind: transport.KindBarrier, Checkpoint: id, CheckpointKind: uint8(checkpoint.KindCheckpoint), Timestamp: time.Now().UnixMilli()}
	}
	if err := tk.onBarrier(ctx, 0, barrier(1)); err != nil {
		t.Fatal(err)
	}
	if err := tk.onBarrier(ctx, 1, transport.Message{Kind: transport.KindCancel, Checkpoint: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-acks:
		if ack.ID != 1 || !strings.Contains(ack.Decline, "cancel marker on channel 1") {
			t.Fatalf("ack %+v, want a decline of checkpoint 1 naming the cancel marker", ack)
		}
	default:
		t.Fatal("no decline of checkpoint 1 after the cancel marker")
	}
	// The coordinator aborts checkpoint 2 while it is captured: no decline.
	if err := tk.onBarrier(ctx, 0, barrier(2)); err != nil {
		t.Fatal(err)
	}
	if err := tk.runControl(ctx, control{action: transport.CheckpointAbort, id: 2, reason: "expired"}); err != nil {
		t.Fatal(err)
	}
	tk.asyncWG.Wait()
	select {
	case ack := <-acks:
		t.Fatalf("ack %+v after the coordinator's own abort", ack)
	default:
	}
}
