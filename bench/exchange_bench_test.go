package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// exchangeBatches are what one run of the exchange benchmark moves: abi
// batches of 32 KiB, as subtasks flush them.
const (
	exchangeBatches    = 4000
	exchangeRecordSize = 100
)

func exchangeBatch() ([]byte, int) {
	var bl abi.Builder
	val := make([]byte, exchangeRecordSize)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	for bl.Size() < 32<<10 {
		bl.Add(0, int64(bl.Len()), []byte(fmt.Sprintf("key-%d", bl.Len())), val)
	}
	return append([]byte(nil), bl.Bytes()...), bl.Len()
}

// exchangeServer starts an embedded server and two connections, one per
// side, as two workers have.
func exchangeServer(b *testing.B) (a, c *nats.Conn) {
	s, err := transport.StartEmbedded(transport.EmbeddedOptions{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	conn := func(name string) *nats.Conn {
		nc, err := transport.ConnectInProcess(s, name)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	return conn("producer"), conn("consumer")
}

// BenchmarkExchange moves the same batches through a JetStream channel
// between two connections (framing, credits, the consumer's queue and input
// gate) and, with the same client settings (async publish with a window of
// transport.DefaultWindow unacknowledged messages, a pull consumer buffering
// twice that, an acknowledgement per message), through raw JetStream
// publish and consume. Both sides use the job's data stream as
// transport.CreateDataStream makes it (Limits retention, file storage);
// the channel also purges what its consumer handed out. It reports both
// rates and their ratio.
//
//	go test -run '^$' -bench Exchange -benchtime 3x ./bench/
func BenchmarkExchange(b *testing.B) {
	data, perBatch := exchangeBatch()
	ncA, ncB := exchangeServer(b)
	ctx := context.Background()
	js, err := jetstream.New(ncA)
	if err != nil {
		b.Fatal(err)
	}
	var chanTime, rawTime time.Duration
	for i := 0; i < b.N; i++ {
		jobID := fmt.Sprintf("bench%d", i)
		if err := transport.CreateDataStream(ctx, js, jobID, 1); err != nil {
			b.Fatal(err)
		}
		chanTime += runChannel(b, ncA, ncB, jobID, data)
		rawTime += runRaw(b, ncA, ncB, jobID, data)
		if err := transport.DeleteDataStream(ctx, js, jobID); err != nil {
			b.Fatal(err)
		}
	}
	recs := float64(exchangeBatches * perBatch * b.N)
	b.ReportMetric(recs/chanTime.Seconds(), "channel-records/s")
	b.ReportMetric(recs/rawTime.Seconds(), "raw-records/s")
	b.ReportMetric(float64(len(data)*exchangeBatches*b.N)/chanTime.Seconds()/(1<<20), "channel-MiB/s")
	b.ReportMetric(rawTime.Seconds()/chanTime.Seconds(), "ratio")
}

func runChannel(b *testing.B, ncA, ncB *nats.Conn, jobID string, data []byte) time.Duration {
	ctx := context.Background()
	mk := func(nc *nats.Conn) *transport.Exchange {
		x, err := transport.NewExchange(ctx, transport.ExchangeConfig{NATS: nc, Job: jobID, Attempt: 0})
		if err != nil {
			b.Fatal(err)
		}
		return x
	}
	xa, xb := mk(ncA), mk(ncB)
	defer xa.Close()
	defer xb.Close()
	start := time.Now()
	out, err := xa.NewOutput(0, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	in, err := xb.NewInput(0, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	errc := make(chan error, 1)
	go func() {
		for k := 0; k < exchangeBatches; k++ {
			if err := out.Send(ctx, transport.Message{Kind: transport.KindData, Data: data}); err != nil {
				errc <- err
				return
			}
		}
		errc <- out.Send(ctx, transport.Message{Kind: transport.KindEnd})
	}()
	g := transport.NewInputGate([]transport.InputChannel{in})
	n := 0
	for g.Open() > 0 {
		ev, err := g.Next(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		m := ev.Msg
		if m.Kind == transport.KindData {
			if len(m.Data) != len(data) {
				b.Fatalf("batch of %d bytes, want %d", len(m.Data), len(data))
			}
			n++
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	if n != exchangeBatches {
		b.Fatalf("received %d batches, want %d", n, exchangeBatches)
	}
	return time.Since(start)
}

func runRaw(b *testing.B, ncA, ncB *nats.Conn, jobID string, data []byte) time.Duration {
	ctx := context.Background()
	const window = transport.DefaultWindow
	jsA, err := jetstream.New(ncA, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		b.Fatal(err)
	}
	jsB, err := jetstream.New(ncB)
	if err != nil {
		b.Fatal(err)
	}
	subject := transport.DataSubject(jobID, 1, 0, 0, 0)
	start := time.Now()
	st, err := jsB.Stream(ctx, transport.DataStream(jobID))
	if err != nil {
		b.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", FilterSubject: subject,
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4 * window, AckWait: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	n := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if len(m.Data()) == len(data)+9 {
			n++
		}
		if n == exchangeBatches {
			close(done)
		}
	}, jetstream.PullMaxMessages(2*window))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	// The same bytes as a channel's data frames.
	frame := append(make([]byte, 9), data...)
	var futs []jetstream.PubAckFuture
	for k := 0; k < exchangeBatches; k++ {
		if len(futs) == window {
			select {
			case <-futs[0].Ok():
			case err := <-futs[0].Err():
				b.Fatal(err)
			}
			futs = futs[1:]
		}
		f, err := jsA.PublishAsync(subject, frame)
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("raw consumer got %d of %d messages in a minute", n, exchangeBatches)
	}
	return time.Since(start)
}

// multiWorkerRecords is the size of one multi-worker benchmark run.
const multiWorkerRecords = 1_000_000

// BenchmarkMultiWorker runs a keyed count (native operators, parallelism 2,
// a key exchange between source and count) on one in-process worker, where
// every channel is local, and on two, where the key exchange crosses the
// workers through JetStream.
//
//	go test -run '^$' -bench MultiWorker -benchtime 3x ./bench/
func BenchmarkMultiWorker(b *testing.B) {
	plan := fmt.Sprintf(`{"name":"keyed","parallelism":2,
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":10000,"words":1,"seed":1}},
  {"id":"count","kind":"operator","operator":"go:count"},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"count","partition":"key"},{"from":"count","to":"sink"}]}`, multiWorkerRecords)
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers-%d", n), func(b *testing.B) { runOnWorkers(b, plan, n) })
	}
}

func runOnWorkers(b *testing.B, plan string, workers int) {
	ctx := context.Background()
	dir := b.TempDir()
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, []byte(plan), 0o644); err != nil {
		b.Fatal(err)
	}
	e, err := engine.Start(ctx, engine.Options{DataDir: dir, Stdout: io.Discard, Workers: workers})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	d, err := engine.Prepare(ctx, e.Runtime(), engine.PrepareOptions{PlanPath: planPath, Overrides: job.Overrides{}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		res, err := e.Run(ctx, d, nil)
		if err != nil {
			b.Fatal(err)
		}
		if res.State != transport.JobFinished {
			b.Fatalf("job %s: %s", res.State, res.Error)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(multiWorkerRecords)*float64(b.N)/el.Seconds(), "records/s")
	if workers > 1 {
		for _, w := range e.Workers() {
			if w.RemoteChannels() == 0 {
				b.Fatalf("worker %s exchanged nothing through JetStream", w.ID())
			}
		}
	}
}
