package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/transport"
)

// TestSinkPreCommitFailureDeclines: a sink whose pre-commit fails (here
// after its transaction was staged, as when the reply is lost) declines
// the checkpoint instead of failing the subtask (DESIGN.md "Checkpoint
// path" step 6; seed 003). The sink takes the pre-commit back, so the
// records of the declined interval are committed by the next checkpoint:
// with a real module and a real JetStream server, the stream ends up
// holding every input record exactly once.
func TestSinkPreCommitFailureDeclines(t *testing.T) {
	const (
		records = 600
		batch   = 20
		every   = 5 // batches between barriers
		failAt  = 2 // the checkpoint whose pre-commit fails
		final   = 1000
	)
	bg := context.Background()
	url, js := natstest.Start(t)
	if _, err := js.CreateStream(bg, jetstream.StreamConfig{Name: "out", Subjects: []string{"out.>"}, Duplicates: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()

	// The sink, with the fault.
	snk, err := connector.NewSink("jetstream", json.RawMessage(`{"url":`+strconv.Quote(url)+`,"stream":"out","subject":"out.{key}"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snk.(connector.Transactional).BeginTransactions(); err != nil {
		t.Fatal(err)
	}
	if err := snk.(connector.Identified).SetIdentity("j", "out"); err != nil {
		t.Fatal(err)
	}
	var faults atomic.Int32
	injected := errors.New("injected: the reply to the staging was lost")
	if !connector.SetPreCommitFault(snk, func(id int64) error {
		if id != failAt {
			return nil
		}
		faults.Add(1)
		return injected
	}) {
		t.Fatal("the jetstream sink takes no pre-commit fault")
	}
	if err := snk.Open(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}

	// The subtask: the module's identity operator feeding the sink.
	mod := compileTestops(t)
	inst, err := mod.NewInstance(ctx, "v/0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Close(bg) })
	st, err := checkpoint.OpenStorage(filepath.Join(t.TempDir(), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan transport.CheckpointAck, 256)
	in := transport.NewLocalChannel(1 << 10)
	tk := &task{jobID: "j", label: "v/0", now: time.Now, wm: abi.MinWatermark, inst: inst, curChan: -1,
		id:    checkpoint.TaskID{Chain: 0, Subtask: 0},
		gate:  transport.NewInputGate([]transport.InputChannel{in}),
		chain: &job.Chain{Vertices: []*job.Vertex{{ID: "v", Operator: "identity"}, {ID: "out", Kind: job.KindSink, Connector: "jetstream"}}, Parallelism: 1},
		sink:  snk, sinkTxn: true,
		ckpt: &ckptEnv{storage: st, mode: checkpoint.ExactlyOnce, tmpDir: t.TempDir(),
			publish: func(a transport.CheckpointAck) { acks <- a }},
		mbox: newMailbox(), triggerTS: map[int64]int64{},
	}
	tk.mbox.poke = tk.gate.Interrupt
	s := &stage{vertex: tk.chain.Vertices[0], op: inst.Operator(), state: noKeyedState{}, coll: stageCollector{nOut: 1, keep: 0}, guest: true}
	s.spec = operator.Spec{VertexID: "v", Operator: "identity", Config: []byte(`{}`), MaxParallelism: 128, Parallel: 1}
	s.svc = &stageServices{keyedState: s.state, t: tk, log: func(int32, string) {}}
	if err := s.op.Open(s.spec, s.svc); err != nil {
		t.Fatal(err)
	}
	tk.stages = []*stage{s}
	done := make(chan error, 1)
	go func() { done <- tk.runGate(ctx) }()

	// The input: records k<i%5> → v<i>, a barrier after every few batches,
	// then the end.
	var bld abi.Builder
	var barriers int64
	for i := 0; i < records; i++ {
		bld.Add(0, int64(i), []byte(fmt.Sprintf("k%d", i%5)), []byte(fmt.Sprintf("v%d", i)))
		if bld.Len() < batch && i < records-1 {
			continue
		}
		if err := in.Send(ctx, transport.Message{Kind: transport.KindData, Data: append([]byte(nil), bld.Bytes()...)}); err != nil {
			t.Fatal(err)
		}
		bld.Reset()
		if (i+1)%(batch*every) == 0 {
			barriers++
			m := transport.Message{Kind: transport.KindBarrier, Checkpoint: barriers, CheckpointKind: uint8(checkpoint.KindCheckpoint), Timestamp: time.Now().UnixMilli()}
			if err := in.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := in.Send(ctx, transport.Message{Kind: transport.KindEnd}); err != nil {
		t.Fatal(err)
	}

	// The coordinator's part: complete what is acknowledged, trigger the
	// final checkpoint once the input has ended.
	declined := map[int64]string{}
	acked := map[int64]bool{}
	deadline := time.After(2 * time.Minute)
	for !acked[final] {
		select {
		case a := <-acks:
			switch {
			case a.EndOfInput:
				tk.mbox.put(control{action: transport.CheckpointTrigger, id: final, kind: checkpoint.KindCheckpoint, timestamp: time.Now().UnixMilli()})
			case a.Decline != "":
				declined[a.ID] = a.Decline
			default:
				acked[a.ID] = true
				tk.mbox.put(control{action: transport.CheckpointComplete, id: a.ID, kind: checkpoint.KindCheckpoint})
			}
		case err := <-done:
			t.Fatalf("the subtask ended before its final checkpoint was acknowledged: %v", err)
		case <-deadline:
			t.Fatalf("no ack of the final checkpoint; acked %v, declined %v", acked, declined)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the subtask failed: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the subtask does not finish after its final checkpoint completed")
	}
	tk.asyncWG.Wait()
	// Snapshots persist asynchronously, so a checkpoint's ack may come
	// after the final checkpoint's: all are published by now.
	for drained := false; !drained; {
		select {
		case a := <-acks:
			if a.Decline != "" {
				declined[a.ID] = a.Decline
			} else if !a.EndOfInput {
				acked[a.ID] = true
			}
		default:
			drained = true
		}
	}

	if n := faults.Load(); n != 1 {
		t.Fatalf("the pre-commit fault fired %d times, want once", n)
	}
	if len(declined) != 1 || !strings.Contains(declined[failAt], injected.Error()) {
		t.Fatalf("declined %v, want checkpoint %d for the injected fault", declined, failAt)
	}
	for id := int64(1); id <= barriers; id++ {
		if id != failAt && !acked[id] {
			t.Errorf("checkpoint %d was not acknowledged", id)
		}
	}
	checkStreamOnce(t, js, "out", records)
}

// checkStreamOnce checks that stream holds the values v0 … v<n-1>, each
// once, under distinct message ids.
func checkStreamOnce(t *testing.T, js jetstream.JetStream, stream string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Msgs; got != uint64(n) {
		t.Errorf("stream %s holds %d messages, want %d", stream, got, n)
	}
	seen := make([]int, n)
	ids := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		if id == "" || ids[id] {
			t.Errorf("message %d has id %q, empty or seen before", seq, id)
		}
		ids[id] = true
		i, err := strconv.Atoi(strings.TrimPrefix(string(m.Data), "v"))
		if err != nil || i < 0 || i >= n {
			t.Fatalf("message %d holds %q, not an input value", seq, m.Data)
		}
		seen[i]++
	}
	for i, c := range seen {
		if c != 1 {
			t.Errorf("value v%d is in the stream %d times, want once", i, c)
		}
	}
}
