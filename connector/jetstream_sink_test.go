package connector

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/objfault"
	"github.com/wstream/wstream/internal/transient"
)

// outStream creates stream "out" on out.> with a duplicate window.
func outStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	createStream(t, js, jetstream.StreamConfig{Name: "out", Subjects: []string{"out.>"}, Duplicates: time.Minute})
}

func openJSSink(t *testing.T, url string, txn bool, extra map[string]any) *jsSink {
	t.Helper()
	cfg := map[string]any{"url": url, "stream": "out", "subject": "out.{key}"}
	for k, v := range extra {
		cfg[k] = v
	}
	s, err := NewSink("jetstream", jsonConfig(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if txn {
		if err := s.(Transactional).BeginTransactions(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Open(testCtx(t), 0, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.(*jsSink).Release() })
	return s.(*jsSink)
}

// recBatch encodes records "k<i%3>" → "v<i>" at ts 100+i for i in [from, to).
func recBatch(from, to int) []byte {
	var b abi.Builder
	for i := from; i < to; i++ {
		b.Add(0, int64(100+i), []byte(fmt.Sprintf("k%d", i%3)), []byte("v"+strconv.Itoa(i)))
	}
	return b.Bytes()
}

func data(ms []storedMsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.data
	}
	return out
}

func vals(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, "v"+strconv.Itoa(i))
	}
	return out
}

func stagedObjects(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	obs, err := js.ObjectStore(testCtx(t), jsDefaultStaging)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(testCtx(t))
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	return names
}

// TestJetStreamSinkDirect: without transactions every batch is published
// at once, in order, to the subject with the key, with key and timestamp
// headers and no message id.
func TestJetStreamSinkDirect(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	s := openJSSink(t, url, false, nil)
	if err := s.Write(recBatch(0, 5)); err != nil {
		t.Fatal(err)
	}
	got := streamMsgs(t, js, "out")
	if !slices.Equal(data(got), vals(0, 5)) {
		t.Fatalf("stream holds %q", data(got))
	}
	for i, m := range got {
		key := fmt.Sprintf("k%d", i%3)
		if m.subject != "out."+key || m.header.Get(jsKeyHeader) != key || m.header.Get(jsTimestampHeader) != strconv.Itoa(100+i) || m.header.Get(jetstream.MsgIDHeader) != "" {
			t.Errorf("message %d: subject %s headers %v", i, m.subject, m.header)
		}
	}
	if err := s.Write(recBatch(5, 2000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := streamMsgs(t, js, "out"); !slices.Equal(data(got), vals(0, 2000)) {
		t.Fatalf("stream holds %d messages, want 2000 in order", len(got))
	}

	// A key that cannot be a subject token is refused, and nothing of the
	// batch is published.
	s = openJSSink(t, url, false, nil)
	var b abi.Builder
	b.Add(0, 1, []byte("ok"), []byte("x"))
	b.Add(0, 1, []byte("a.b"), []byte("y"))
	if err := s.Write(b.Bytes()); err == nil || !strings.Contains(err.Error(), `the key "a.b" cannot stand for {key} in subject out.{key}`) {
		t.Errorf("write of key a.b: %v", err)
	}
	if n := len(streamMsgs(t, js, "out")); n != 2000 {
		t.Errorf("%d messages after a refused batch", n)
	}
}

// TestJetStreamSinkTransactions: records are invisible until their
// checkpoint commits; a commit publishes them in order with message ids
// RUN/SUBTASK/CHECKPOINT/INDEX and removes the staged object; committing
// again adds nothing; the state is small.
func TestJetStreamSinkTransactions(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	s := openJSSink(t, url, true, nil)
	if err := s.Write(recBatch(0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(recBatch(3, 5)); err != nil {
		t.Fatal(err)
	}
	st1, err := s.PreCommit(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(recBatch(5, 8)); err != nil {
		t.Fatal(err)
	}
	st2, err := s.PreCommit(2)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(streamMsgs(t, js, "out")); n != 0 {
		t.Fatalf("%d messages visible before any commit", n)
	}
	run := s.run
	if !regexp.MustCompile(`^\{"version":1,"kind":"jetstream","subtask":0,"run":"[0-9a-f]{16}","checkpoint":2,"pending":\[` +
		`\{"id":1,"object":"[0-9a-f]{16}/0/0000000001","records":5,"bytes":\d+\},\{"id":2,"object":"[0-9a-f]{16}/0/0000000002","records":3,"bytes":\d+\}\]\}$`).Match(st2) {
		t.Errorf("state %s", st2)
	}
	if len(st1) > 200 || len(st2) > 300 {
		t.Errorf("states of %d and %d bytes: the records belong in the staging store", len(st1), len(st2))
	}
	if got, want := stagedObjects(t, js), []string{run + "/0/0000000001", run + "/0/0000000002"}; !slices.Equal(got, want) {
		t.Errorf("staged %q, want %q", got, want)
	}
	if err := s.Commit(1); err != nil {
		t.Fatal(err)
	}
	got := streamMsgs(t, js, "out")
	if !slices.Equal(data(got), vals(0, 5)) {
		t.Fatalf("after commit 1 the stream holds %q", data(got))
	}
	for i, m := range got {
		if id := m.header.Get(jetstream.MsgIDHeader); id != fmt.Sprintf("%s/0/1/%d", run, i) {
			t.Errorf("message %d has id %q", i, id)
		}
	}
	if err := s.Commit(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(2); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(2); err != nil {
		t.Fatal(err)
	}
	if got := streamMsgs(t, js, "out"); !slices.Equal(data(got), vals(0, 8)) || got[7].header.Get(jetstream.MsgIDHeader) != run+"/0/2/2" {
		t.Fatalf("after commit 2 the stream holds %q", data(got))
	}
	if objs := stagedObjects(t, js); len(objs) != 0 {
		t.Errorf("objects left after the commits: %q", objs)
	}
	if _, err := s.PreCommit(2); err == nil || !strings.Contains(err.Error(), "checkpoint ids must increase") {
		t.Errorf("PreCommit(2) again: %v", err)
	}
	// An empty transaction stages nothing; Close publishes the rest as
	// transaction last+1.
	if _, err := s.PreCommit(3); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(recBatch(8, 10)); err != nil {
		t.Fatal(err)
	}
	if objs := stagedObjects(t, js); len(objs) != 0 {
		t.Errorf("an empty transaction staged %q", objs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got = streamMsgs(t, js, "out")
	if !slices.Equal(data(got), vals(0, 10)) || got[9].header.Get(jetstream.MsgIDHeader) != run+"/0/4/1" {
		t.Fatalf("after close the stream holds %q (last id %q)", data(got), got[len(got)-1].header.Get(jetstream.MsgIDHeader))
	}
}

// TestJetStreamSinkReplay: a commit that published its messages and then
// failed before it finished (the object is still staged) is published
// again by Recover from the checkpoint's state: the stream's duplicate
// window drops every message, so nothing appears twice. Transactions
// staged after the restored checkpoint are deleted, and later
// transactions continue with the restored message id token.
func TestJetStreamSinkReplay(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	a := openJSSink(t, url, true, nil)
	if err := a.Write(recBatch(0, 4)); err != nil {
		t.Fatal(err)
	}
	state, err := a.PreCommit(1)
	if err != nil {
		t.Fatal(err)
	}
	// The commit's messages reach the stream, then the process dies.
	if err := a.publish(testCtx(t), a.pending[0].data, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Write(recBatch(4, 6)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PreCommit(2); err != nil { // checkpoint 2 never completes
		t.Fatal(err)
	}
	if err := a.Write(recBatch(6, 7)); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if n := len(stagedObjects(t, js)); n != 2 {
		t.Fatalf("%d staged objects after release, want 2", n)
	}

	for range 2 { // restoring twice changes nothing either
		b := openJSSink(t, url, true, nil)
		if err := b.Recover(state, 1); err != nil {
			t.Fatal(err)
		}
		if b.run != a.run {
			t.Errorf("restored token %s, want %s", b.run, a.run)
		}
		if got := streamMsgs(t, js, "out"); !slices.Equal(data(got), vals(0, 4)) {
			t.Fatalf("after recover the stream holds %q, want each of the 4 committed records once", data(got))
		}
		if objs := stagedObjects(t, js); len(objs) != 0 {
			t.Errorf("objects left after recover: %q", objs)
		}
		b.Release()
	}

	b := openJSSink(t, url, true, nil)
	if err := b.Write(recBatch(0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.Recover(state, 1); err == nil || !strings.Contains(err.Error(), "Recover must come after Open and before any Write") {
		t.Errorf("Recover after Write: %v", err)
	}
	b.Release()

	// The replay of the records after checkpoint 1 commits at checkpoint 5.
	c := openJSSink(t, url, true, nil)
	if err := c.Recover(state, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(recBatch(4, 7)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PreCommit(1); err == nil {
		t.Error("PreCommit of the restored checkpoint's id succeeded")
	}
	if _, err := c.PreCommit(5); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(5); err != nil {
		t.Fatal(err)
	}
	got := streamMsgs(t, js, "out")
	if !slices.Equal(data(got), vals(0, 7)) || got[6].header.Get(jetstream.MsgIDHeader) != a.run+"/0/5/2" {
		t.Fatalf("the stream holds %q", data(got))
	}

	for _, bad := range []struct{ state, want string }{
		{strings.Replace(string(state), `"subtask":0`, `"subtask":1`, 1), "the state belongs to subtask 1"},
		{strings.Replace(string(state), `"checkpoint":1`, `"checkpoint":2`, 1), "the state was taken at checkpoint 2"},
		{strings.Replace(string(state), `"kind":"jetstream"`, `"kind":"file"`, 1), `the state belongs to a "file" sink`},
		{`{"version":2}`, "state version 2 is not supported"},
		{strings.Replace(string(state), `/0000000001"`, `/0000000009"`, 1), "the state names object"},
	} {
		d := openJSSink(t, url, true, nil)
		if err := d.Recover([]byte(bad.state), 1); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Recover(%s): %v, want %q", bad.state, err, bad.want)
		}
	}
}

// TestJetStreamSinkAbort: Abort discards the open and the staged
// transactions; nothing of them is published.
func TestJetStreamSinkAbort(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	s := openJSSink(t, url, true, nil)
	if err := s.Write(recBatch(0, 4)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PreCommit(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(recBatch(4, 6)); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(); err != nil {
		t.Fatal(err)
	}
	if n := len(streamMsgs(t, js, "out")); n != 0 {
		t.Errorf("%d messages after abort", n)
	}
	if objs := stagedObjects(t, js); len(objs) != 0 {
		t.Errorf("objects left after abort: %q", objs)
	}
	if err := s.Write(recBatch(0, 1)); err == nil || !strings.HasSuffix(err.Error(), "write: not open") {
		t.Errorf("Write after Abort: %v", err)
	}
}

// TestJetStreamSinkLimitsAndCreate: a transaction beyond
// maxTransactionBytes fails the sink with advice; "create" creates a
// missing stream with the duplicate window.
func TestJetStreamSinkLimitsAndCreate(t *testing.T) {
	url, js := startJetStream(t)
	s := openJSSink(t, url, true, map[string]any{"create": true, "duplicateWindow": 30000, "maxTransactionBytes": 200})
	st, err := js.Stream(testCtx(t), "out")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.Duplicates != 30*time.Second || !slices.Equal(c.Subjects, []string{"out.*"}) {
		t.Errorf("created stream: duplicates %s subjects %v", c.Duplicates, c.Subjects)
	}
	if err := s.Write(recBatch(0, 2)); err != nil {
		t.Fatal(err)
	}
	err = s.Write(recBatch(2, 10))
	if err == nil || !strings.Contains(err.Error(), "more than maxTransactionBytes (200): checkpoint more often or raise the limit") {
		t.Fatalf("oversized transaction: %v", err)
	}
	if _, perr := s.PreCommit(1); perr != err {
		t.Errorf("PreCommit after a failed write: %v", perr)
	}
	if cerr := s.Close(); cerr != err {
		t.Errorf("Close after a failed write: %v", cerr)
	}
	if n := len(streamMsgs(t, js, "out")); n != 0 {
		t.Errorf("%d messages published by a failed sink", n)
	}
	// A second sink finds the stream created.
	openJSSink(t, url, true, map[string]any{"create": true})
}

// TestJetStreamSinkIdentity: given its job and vertex, the sink's message
// ids are JOB/VERTEX/SUBTASK/CHECKPOINT/INDEX, carried in its state so a
// restored sink keeps them; bad ids and a late SetIdentity are refused.
func TestJetStreamSinkIdentity(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	s, err := NewSink("jetstream", jsonConfig(t, map[string]any{"url": url, "stream": "out", "subject": "out.{key}"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.(Identified).SetIdentity("job/x", "sink"); err == nil {
		t.Error("SetIdentity accepted a job id with a slash")
	}
	if err := s.(Identified).SetIdentity("wordcount-1a2b", "sink"); err != nil {
		t.Fatal(err)
	}
	if err := s.(Transactional).BeginTransactions(); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t), 0, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.(Identified).SetIdentity("other", "sink"); err == nil {
		t.Error("SetIdentity after Open was accepted")
	}
	if err := s.Write(recBatch(0, 2)); err != nil {
		t.Fatal(err)
	}
	st, err := s.(Transactional).PreCommit(5)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(st), `"run":"wordcount-1a2b/sink"`) {
		t.Errorf("state %s does not carry the identity", st)
	}
	if got := stagedObjects(t, js); !slices.Equal(got, []string{"wordcount-1a2b/sink/0/0000000005"}) {
		t.Errorf("staged %q", got)
	}
	if err := s.(Transactional).Commit(5); err != nil {
		t.Fatal(err)
	}
	got := streamMsgs(t, js, "out")
	for i, m := range got {
		if id := m.header.Get(jetstream.MsgIDHeader); id != fmt.Sprintf("wordcount-1a2b/sink/0/5/%d", i) {
			t.Errorf("message %d has id %q", i, id)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d messages, want 2", len(got))
	}

	// A restored sink takes the identity from its state.
	r := openJSSink(t, url, true, nil)
	if err := r.Recover(st, 5); err != nil {
		t.Fatal(err)
	}
	if r.run != "wordcount-1a2b/sink" {
		t.Errorf("restored token %q", r.run)
	}
}

// openJSSinkAt is openJSSink for subtask sub of parallelism par.
func openJSSinkAt(t *testing.T, url string, sub, par int) *jsSink {
	t.Helper()
	s, err := NewSink("jetstream", jsonConfig(t, map[string]any{"url": url, "stream": "out", "subject": "out.{key}"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.(Transactional).BeginTransactions(); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t), sub, par); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.(*jsSink).Release() })
	return s.(*jsSink)
}

// TestJetStreamSinkRecoverFrom: a job restored at parallelism 1 from a
// savepoint taken at parallelism 3 commits what every old subtask had
// pre-committed (subtask 0 its own index, and the removed 1 and 2), under
// their message ids: what the old job committed meanwhile is not repeated,
// nothing is lost, and the old job's later staging is left alone.
func TestJetStreamSinkRecoverFrom(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	var states [][]byte
	var olds []*jsSink
	for sub := range 3 {
		s := openJSSinkAt(t, url, sub, 3)
		if err := s.Write(recBatch(10*sub, 10*sub+4)); err != nil {
			t.Fatal(err)
		}
		st, err := s.PreCommit(5)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
		olds = append(olds, s)
	}
	// The old job committed subtask 1's transaction before it stopped, and
	// subtask 2 staged a later one.
	if err := olds[1].Commit(5); err != nil {
		t.Fatal(err)
	}
	if err := olds[2].Write(recBatch(90, 92)); err != nil {
		t.Fatal(err)
	}
	if _, err := olds[2].PreCommit(6); err != nil {
		t.Fatal(err)
	}
	later := olds[2].objectName(6)

	n := openJSSinkAt(t, url, 0, 1)
	if err := n.Recover(nil, 5); err != nil {
		t.Fatal(err)
	}
	if err := n.RecoverFrom(states, 5); err != nil {
		t.Fatal(err)
	}
	want := append(append(vals(0, 4), vals(10, 14)...), vals(20, 24)...)
	got := data(streamMsgs(t, js, "out"))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the stream holds %q, want each of %q once", got, want)
	}
	if objs := stagedObjects(t, js); !slices.Equal(objs, []string{later}) {
		t.Errorf("staged after the restore: %q, want only the old job's later %q", objs, later)
	}
	// Again (a restore that failed after it): nothing appears twice.
	if err := openJSSinkAt(t, url, 0, 1).RecoverFrom(states, 5); err != nil {
		t.Fatal(err)
	}
	if n := len(streamMsgs(t, js, "out")); n != len(want) {
		t.Fatalf("%d messages after a second recovery, want %d", n, len(want))
	}
	// A subtask takes over only its own index and the removed ones that
	// map to it.
	m := openJSSinkAt(t, url, 1, 2)
	if err := m.RecoverFrom(states[:1], 5); err == nil || !strings.Contains(err.Error(), "does not take over subtask 0") {
		t.Errorf("subtask 1 of 2 recovering subtask 0: %v", err)
	}
	if err := m.RecoverFrom([][]byte{states[1]}, 4); err == nil || !strings.Contains(err.Error(), "taken at checkpoint 5") {
		t.Errorf("a state of another checkpoint: %v", err)
	}
}

// TestJetStreamSinkStagingRetried: staging a transaction whose put is
// refused with 429 fewer times than the limit pre-commits it, and its
// commit publishes every record; refused every time, the pre-commit fails
// saying which transaction, which object and why.
func TestJetStreamSinkStagingRetried(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	s := openJSSink(t, url, true, nil)
	flaky := objfault.NewFlaky(s.obs)
	s.obs = flaky
	flaky.Fail(objfault.OpPut, transient.Default.Attempts-1)
	if err := s.Write(recBatch(0, 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PreCommit(1); err != nil {
		t.Fatalf("PreCommit with its put refused %d times: %v", transient.Default.Attempts-1, err)
	}
	if n := flaky.Faulted(objfault.OpPut); n != transient.Default.Attempts-1 {
		t.Fatalf("%d puts refused, want %d", n, transient.Default.Attempts-1)
	}
	if err := s.Commit(1); err != nil {
		t.Fatal(err)
	}
	if got := streamMsgs(t, js, "out"); !slices.Equal(data(got), vals(0, 5)) {
		t.Fatalf("after commit 1 the stream holds %q", data(got))
	}

	flaky.Fail(objfault.OpPut, transient.Default.Attempts)
	if err := s.Write(recBatch(5, 8)); err != nil {
		t.Fatal(err)
	}
	_, err := s.PreCommit(2)
	var spent *transient.Exhausted
	if !errors.As(err, &spent) || !errors.Is(err, objfault.TooManyRequests) || !strings.Contains(err.Error(), "precommit 2") ||
		!strings.Contains(err.Error(), s.objectName(2)) {
		t.Fatalf("PreCommit refused every time = %v; want the 429 for transaction 2's object, attempts spent", err)
	}
}

// TestJetStreamSinkAbortPreCommit: a pre-commit whose object was stored but
// whose reply was lost is taken back by AbortPreCommit: the object goes,
// the records stay in the open transaction, and the next checkpoint
// publishes them once, under its own message ids; a restore from that
// checkpoint adds nothing.
func TestJetStreamSinkAbortPreCommit(t *testing.T) {
	url, js := startJetStream(t)
	outStream(t, js)
	s := openJSSink(t, url, true, nil)
	if err := s.Write(recBatch(0, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PreCommit(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(recBatch(3, 6)); err != nil {
		t.Fatal(err)
	}
	lost := errors.New("lost reply")
	if !SetPreCommitFault(s, func(int64) error { return lost }) {
		t.Fatal("the jetstream sink takes no pre-commit fault")
	}
	if _, err := s.PreCommit(2); !errors.Is(err, lost) {
		t.Fatalf("PreCommit(2) with a fault: %v", err)
	}
	SetPreCommitFault(s, nil)
	run := s.run
	if got := stagedObjects(t, js); !slices.Contains(got, run+"/0/0000000002") {
		t.Fatalf("staged %q: the fault comes after the object is stored", got)
	}
	if err := s.AbortPreCommit(2); err != nil {
		t.Fatalf("AbortPreCommit(2): %v", err)
	}
	if got, want := stagedObjects(t, js), []string{run + "/0/0000000001"}; !slices.Equal(got, want) {
		t.Fatalf("staged %q after the abort, want %q", got, want)
	}
	if err := s.Write(recBatch(6, 8)); err != nil {
		t.Fatal(err)
	}
	st3, err := s.PreCommit(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(3); err != nil {
		t.Fatal(err)
	}
	got := streamMsgs(t, js, "out")
	if !slices.Equal(data(got), vals(0, 8)) {
		t.Fatalf("the stream holds %q, want every record once", data(got))
	}
	if id := got[3].header.Get(jetstream.MsgIDHeader); id != run+"/0/3/0" {
		t.Errorf("the first record of the declined interval has id %q, want checkpoint 3's", id)
	}
	s.Release()
	r := openJSSink(t, url, true, nil)
	if err := r.Recover(st3, 3); err != nil {
		t.Fatal(err)
	}
	if got := streamMsgs(t, js, "out"); !slices.Equal(data(got), vals(0, 8)) {
		t.Fatalf("after a restore from 3 the stream holds %q", data(got))
	}
	if objs := stagedObjects(t, js); len(objs) != 0 {
		t.Errorf("objects left: %q", objs)
	}
	if err := r.AbortPreCommit(4); err == nil {
		t.Error("AbortPreCommit without a failed pre-commit succeeded")
	}
}
