package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsPlan is a keyed job from JetStream to JetStream whose output shows any
// loss or repetition: stream "in" read by the bounded jetstream source,
// passed through the chaos operator (which, with timed, fails its subtask
// 300–500 ms after every start and stalls now and then so that a run takes
// long enough to fail), a running count per key, and the exactly-once
// jetstream sink publishing "key → count" to out.{key} of stream out.
func jsPlan(url, out string, timed bool) string {
	failAfter := "[0,0]"
	if timed {
		failAfter = "[300,500]"
	}
	return fmt.Sprintf(`{"name":"jetstream","parallelism":2,
 "checkpoint":{"interval":200,"mode":"aligned"},
 "restart":{"strategy":"fixed-delay","attempts":1000,"delay":10},
 "vertices":[
  {"id":"source","kind":"source","connector":"jetstream","config":{"url":%q,"stream":"in","subject":"in.>","bounded":true,"timestamp":"header"}},
  {"id":"chaos","kind":"operator","operator":"chaos","config":{"seed":11,"stallEvery":100,"stallMs":20,"failAfterMs":%s,"exitShare":0.3}},
  {"id":"count","kind":"operator","operator":"runcount"},
  {"id":"sink","kind":"sink","connector":"jetstream","config":{"url":%q,"stream":%q,"subject":"%s.{key}"}}],
 "edges":[
  {"from":"source","to":"chaos"},
  {"from":"chaos","to":"count","partition":"key"},
  {"from":"count","to":"sink","partition":"rebalance"}]}`, url, failAfter, url, out, strings.ToLower(out))
}

// startNATS starts a NATS server with JetStream on 127.0.0.1 for the test.
func startNATS(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	return natstest.Start(t)
}

// outputLines reads every message of stream as "subject key data" lines,
// sorted, and the set of message ids.
func outputLines(t *testing.T, js jetstream.JetStream, stream string) (lines []string, ids map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids = map[string]bool{}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m.Subject+" "+m.Header.Get("Wstream-Key")+" "+string(m.Data))
		id := m.Header.Get(jetstream.MsgIDHeader)
		if id == "" || ids[id] {
			t.Fatalf("message %d has message id %q (empty or repeated)", seq, id)
		}
		ids[id] = true
	}
	slices.Sort(lines)
	return lines, ids
}

func streamCount(js jetstream.JetStream, stream string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// TestJetStreamExactlyOnce runs the keyed JetStream-to-JetStream job once
// without failures and once with a failure injected 300–500 ms after every
// start of its operators and the process killed once and resumed, and
// requires the output stream of the second run to hold exactly the
// messages of the first: the source rewinds to its checkpointed sequences,
// and the sink's transactions, replayed after a restore, are deduplicated
// by the stream.
func TestJetStreamExactlyOnce(t *testing.T) {
	mod := module(t, "testops")
	url, js := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "in", Subjects: []string{"in.>"}},
		{Name: "REF", Subjects: []string{"ref.*"}, Duplicates: 5 * time.Minute},
		{Name: "OUT", Subjects: []string{"out.*"}, Duplicates: 5 * time.Minute},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	const n, keys = 6000, 40
	for i := range n {
		k := "k" + strconv.Itoa(i%keys)
		m := &nats.Msg{Subject: "in." + k, Data: []byte("r" + strconv.Itoa(i)), Header: nats.Header{}}
		m.Header.Set("Wstream-Key", k)
		m.Header.Set("Wstream-Timestamp", strconv.Itoa(i))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishing the input timed out")
	}

	// The failure-free run.
	refDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(refDir, "plan.json"), []byte(jsPlan(url, "REF", false)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, refDir, "deploy", "-q", "--plan", "plan.json", mod); r.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.code, r.stderr)
	}
	want, _ := outputLines(t, js, "REF")
	if len(want) != n {
		t.Fatalf("the reference run published %d messages, want %d", len(want), n)
	}
	for i := range want {
		want[i] = strings.Replace(want[i], "ref.", "out.", 1)
	}
	// Each key's running count goes 1…n/keys: the reference is right.
	perKey := map[string]int{}
	for _, l := range want {
		f := strings.Fields(l)
		c, _ := strconv.Atoi(f[2])
		perKey[f[1]] = max(perKey[f[1]], c)
	}
	for k, c := range perKey {
		if c != n/keys {
			t.Fatalf("reference: key %s counted to %d, want %d", k, c, n/keys)
		}
	}

	// With failures, and one SIGKILL of the whole process once a quarter of
	// the output is committed.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), []byte(jsPlan(url, "OUT", true)), 0o644); err != nil {
		t.Fatal(err)
	}
	kills := 0
	args := []string{"deploy", "--plan", "plan.json", mod}
	for {
		code, stderr := runUntil(t, dir, args, func() bool {
			return kills == 0 && streamCount(js, "OUT") >= n/4
		})
		if code == -1 {
			kills++
			args = []string{"deploy", "--resume", "-"}
			continue
		}
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		break
	}
	attempts := jobAttempt(t, filepath.Join(dir, "wstream-data"))
	t.Logf("%d process kills, %d attempts", kills, attempts)
	if attempts < 1 {
		t.Fatal("no failure was injected")
	}
	got, ids := outputLines(t, js, "OUT")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output stream differs from the failure-free run: %d messages vs %d; first difference %s", len(got), len(want), firstDiff(got, want))
	}
	// Every message came from a transaction of a checkpoint (or the last
	// one, published at the end), each with a message id
	// JOB/VERTEX/SUBTASK/CHECKPOINT/INDEX.
	checkpoints := map[string]bool{}
	for id := range ids {
		f := strings.Split(id, "/")
		if len(f) != 5 || !strings.HasPrefix(f[0], "jetstream-") || f[1] != "sink" {
			t.Fatalf("message id %q is not JOB/VERTEX/SUBTASK/CHECKPOINT/INDEX", id)
		}
		checkpoints[f[3]] = true
	}
	if len(checkpoints) < 2 {
		t.Errorf("the output came from %d transactions, want several checkpoints'", len(checkpoints))
	}
	// Nothing of the run that produced the output stays staged: what a
	// failed attempt staged after its checkpoint was deleted on restore.
	runs := map[string]bool{}
	for id := range ids {
		runs[strings.Split(id, "/")[0]] = true
	}
	obs, err := js.ObjectStore(ctx, "wstream_staging")
	if err != nil {
		t.Fatal(err)
	}
	if list, err := obs.List(ctx); err == nil {
		for _, o := range list {
			if runs[strings.Split(o.Name, "/")[0]] {
				t.Errorf("transaction %s is still staged", o.Name)
			}
		}
	}
}
