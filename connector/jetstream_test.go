package connector

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startJetStream starts a NATS server with JetStream on a random port of
// 127.0.0.1, storing in a temporary directory, and returns its URL and a
// JetStream client.
func startJetStream(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	return natstest.Start(t)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func createStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	st, err := js.CreateStream(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// storedMsg is a message read back from a stream.
type storedMsg struct {
	seq     uint64
	subject string
	header  nats.Header
	data    string
}

// streamMsgs reads every message of stream in sequence order.
func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) []storedMsg {
	t.Helper()
	ctx := testCtx(t)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, storedMsg{seq: m.Sequence, subject: m.Subject, header: m.Header, data: string(m.Data)})
	}
	return out
}

func jsonConfig(t *testing.T, m map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestJetStreamConfigErrors(t *testing.T) {
	for _, c := range []struct {
		sink bool
		cfg  string
		want string
	}{
		{false, `{}`, `connector jetstream: config.stream: missing`},
		{false, `{"stream":"s","creds":"c"}`, `connector jetstream: config.creds: needs url`},
		{false, `{"url":"nats://127.0.0.1:1"}`, `connector jetstream: config.stream: missing`},
		{false, `{"url":"u","stream":"a.b"}`, `connector jetstream: config.stream: "a.b" is not a stream name`},
		{false, `{"url":"u","stream":"s","subject":"a..b"}`, `connector jetstream: config.subject: "a..b" is not a subject filter`},
		{false, `{"url":"u","stream":"s","key":"value"}`, `connector jetstream: config.key: "value" must be`},
		{false, `{"url":"u","stream":"s","timestamp":"now"}`, `connector jetstream: config.timestamp: "now" must be`},
		{false, `{"url":"u","stream":"s","watermarkDelay":-1}`, `connector jetstream: config.watermarkDelay: -1 must be in`},
		{false, `{"url":"u","stream":"s","token":"t","creds":"c"}`, `connector jetstream: config: give at most one way to authenticate, not creds and token`},
		{false, `{"url":"u","stream":"s","password":"p"}`, `connector jetstream: config.user: missing: a password needs a user`},
		{false, `{"url":"u","stream":"s","tlsCert":"c"}`, `connector jetstream: config.tlsCert: tlsCert and tlsKey go together`},
		{false, `{"url":"u","stream":"s","path":"x"}`, `connector jetstream: config.path: unknown field (known: bounded, creds, key, keyHeader, nkey, password, stream, subject, timestamp, timestampHeader, tlsCA, tlsCert, tlsKey, token, url, user, watermarkDelay)`},
		{true, `{"url":"u","stream":"s"}`, `connector jetstream: config.subject: missing`},
		{true, `{"url":"u","stream":"s","subject":"out.*"}`, `connector jetstream: config.subject: "out.*" is not a subject without wildcards`},
		{true, `{"url":"u","stream":"s","subject":"out","duplicateWindow":0}`, `connector jetstream: config.duplicateWindow: 0 must be in`},
		{true, `{"url":"u","stream":"s","subject":"out","staging":"a.b"}`, `connector jetstream: config.staging: "a.b" is not an object store bucket name`},
		{true, `{"url":"u","stream":"s","subject":"out","keyHeader":"a b"}`, `connector jetstream: config.keyHeader: "a b" is not a header name`},
		{true, `{"url":"u","stream":"s","subject":"out","maxTransactionBytes":0}`, `connector jetstream: config.maxTransactionBytes: 0 must be in`},
	} {
		var err error
		if c.sink {
			err = ValidateSink("jetstream", json.RawMessage(c.cfg))
		} else {
			err = ValidateSource("jetstream", json.RawMessage(c.cfg))
		}
		var ce *ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s (sink %v): got %v, want prefix %q", c.cfg, c.sink, err, c.want)
		}
	}
	for _, cfg := range []string{
		`{"url":"nats://h:4222","stream":"s","subject":"in.>","key":"subject","timestamp":"header","bounded":true,"user":"u","password":"p","tlsCA":"ca.pem"}`,
		`{"url":"tls://h:4222","stream":"s","nkey":"seed.nk","tlsCert":"c.pem","tlsKey":"k.pem"}`,
	} {
		if err := ValidateSource("jetstream", json.RawMessage(cfg)); err != nil {
			t.Errorf("%s: %v", cfg, err)
		}
	}
	if err := ValidateSink("jetstream", json.RawMessage(`{"url":"u","stream":"s","subject":"out.{key}.v","create":true,"creds":"x.creds"}`)); err != nil {
		t.Error(err)
	}
}

// TestJetStreamOpenErrors: connection and stream problems are reported
// when the connector opens, naming the stream.
func TestJetStreamOpenErrors(t *testing.T) {
	url, _ := startJetStream(t)
	src, err := NewSource("jetstream", jsonConfig(t, map[string]any{"url": url, "stream": "missing"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(testCtx(t), 0, 1); err == nil || !strings.Contains(err.Error(), "connector jetstream: source missing: open:") {
		t.Errorf("open of a missing stream: %v", err)
	}
	snk, err := NewSink("jetstream", jsonConfig(t, map[string]any{"url": url, "stream": "missing", "subject": "out"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snk.Open(testCtx(t), 0, 1); err == nil || !strings.Contains(err.Error(), `stream missing does not exist: create it (with a duplicate window) or set "create"`) {
		t.Errorf("open of a missing stream: %v", err)
	}
	src, err = NewSource("jetstream", jsonConfig(t, map[string]any{"url": "nats://127.0.0.1:1", "stream": "s"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(testCtx(t), 0, 1); err == nil || !strings.Contains(err.Error(), "connect to nats://127.0.0.1:1") {
		t.Errorf("open without a server: %v", err)
	}
	if err := src.Open(testCtx(t), 2, 2); err == nil || !strings.Contains(err.Error(), "subtask 2 of parallelism 2 is out of range") {
		t.Errorf("open of subtask 2 of 2: %v", err)
	}
}
