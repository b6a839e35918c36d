package connector

import (
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"
)

func TestNames(t *testing.T) {
	if got, want := SourceNames(), []string{"file", "gen", "jetstream"}; !slices.Equal(got, want) {
		t.Errorf("SourceNames() = %v, want %v", got, want)
	}
	if got, want := SinkNames(), []string{"discard", "file", "jetstream", "stdout"}; !slices.Equal(got, want) {
		t.Errorf("SinkNames() = %v, want %v", got, want)
	}
}

func TestUnknownConnector(t *testing.T) {
	_, err := NewSource("kafka", nil)
	if !errors.Is(err, ErrUnknown) {
		t.Fatalf("NewSource(kafka) error = %v, want ErrUnknown", err)
	}
	if got, want := err.Error(), `connector: unknown connector: no source named "kafka" (known: file, gen, jetstream)`; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	err = ValidateSink("gen", nil)
	if got, want := err.Error(), `connector: unknown connector: no sink named "gen" (known: discard, file, jetstream, stdout)`; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	if err := ValidateSource("stdout", nil); !errors.Is(err, ErrUnknown) {
		t.Errorf("ValidateSource(stdout) error = %v, want ErrUnknown", err)
	}
}

func TestValidConfigs(t *testing.T) {
	for _, tc := range []struct {
		sink      bool
		connector string
		config    string
	}{
		{false, "gen", ``},
		{false, "gen", `null`},
		{false, "gen", ` {} `},
		{false, "gen", `{"count":10,"keys":1,"words":1024,"seed":0,"rate":0.5,"interval":0,"disorder":3,"watermarkDelay":0,"start":-100}`},
		{false, "file", `{"path":"in.txt"}`},
		{false, "file", `{"path":"in.tsv","format":"tsv","watermarkDelay":5}`},
		{true, "stdout", ``},
		{true, "stdout", `{}`},
		{true, "discard", `null`},
		{true, "file", `{"path":"out.txt","format":"tsv"}`},
	} {
		var err error
		if tc.sink {
			err = ValidateSink(tc.connector, json.RawMessage(tc.config))
		} else {
			err = ValidateSource(tc.connector, json.RawMessage(tc.config))
		}
		if err != nil {
			t.Errorf("%s %s: unexpected error %v", tc.connector, tc.config, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		sink      bool
		connector string
		config    string
		field     string
		want      string
	}{
		{false, "gen", `{"cout":1}`, "cout", `connector gen: config.cout: unknown field (known: count, disorder, interval, keys, rate, seed, start, watermarkDelay, words)`},
		{false, "gen", `{"count":"many"}`, "count", `connector gen: config.count: JSON string is not a valid integer`},
		{false, "gen", `{"count":1.5}`, "count", `connector gen: config.count: JSON number 1.5 is not a valid integer`},
		{false, "gen", `[1]`, "", `connector gen: config: must be a JSON object, not array`},
		{false, "gen", `{"count":1} {}`, "", `connector gen: config: unexpected data after the JSON object`},
		{false, "gen", `{"count":1,}`, "", `connector gen: config: invalid JSON at byte 12: invalid character '}' looking for beginning of object key string`},
		{false, "gen", `{"count":`, "", `connector gen: config: truncated JSON`},
		{false, "gen", `{"count":-1}`, "count", `connector gen: config.count: -1 must be ≥ 0`},
		{false, "gen", `{"keys":0}`, "keys", `connector gen: config.keys: 0 must be ≥ 1`},
		{false, "gen", `{"words":0}`, "words", `connector gen: config.words: 0 must be in [1, 1024]`},
		{false, "gen", `{"words":1025}`, "words", `connector gen: config.words: 1025 must be in [1, 1024]`},
		{false, "gen", `{"rate":-2.5}`, "rate", `connector gen: config.rate: -2.5 must be ≥ 0`},
		{false, "gen", `{"interval":-1}`, "interval", `connector gen: config.interval: -1 must be in [0, 1099511627776]`},
		{false, "gen", `{"disorder":-1}`, "disorder", `connector gen: config.disorder: -1 must be in [0, 1099511627776]`},
		{false, "gen", `{"watermarkDelay":-3}`, "watermarkDelay", `connector gen: config.watermarkDelay: -3 must be in [0, 1099511627776]`},
		{false, "gen", `{"start":9223372036854775807}`, "start", `connector gen: config.start: 9223372036854775807 must be in [-4611686018427387904, 4611686018427387904]`},
		{false, "file", `{}`, "path", `connector file: config.path: missing: the source needs the file to read`},
		{false, "file", `{"path":"x","format":"csv"}`, "format", `connector file: config.format: "csv" must be "text" or "tsv"`},
		{false, "file", `{"path":"x","watermarkDelay":-1}`, "watermarkDelay", `connector file: config.watermarkDelay: -1 must be in [0, 1099511627776]`},
		{false, "file", `{"path":"x","delay":1}`, "delay", `connector file: config.delay: unknown field (known: batch, format, path, rate, watermarkDelay)`},
		{true, "file", `null`, "path", `connector file: config.path: missing: the sink needs the file to write`},
		{true, "file", `{"path":"x","format":"json"}`, "format", `connector file: config.format: "json" must be "text" or "tsv"`},
		{true, "stdout", `{"color":true}`, "color", `connector stdout: config.color: unknown field (the connector takes no configuration)`},
		{true, "discard", `{"x":1}`, "x", `connector discard: config.x: unknown field (known: rate)`},
		{true, "discard", `{"rate":-1}`, "rate", `connector discard: config.rate: -1 must be a finite number ≥ 0`},
		{false, "jetstream", `{"stream":"A","stream":"KV_wstream_jobs"}`, "stream", `connector jetstream: config.stream: duplicate field: give it once`},
		{true, "jetstream", `{"stream":"S","subject":"s","url":"","url":"nats://x:1"}`, "url", `connector jetstream: config.url: duplicate field: give it once`},
		{false, "jetstream", `{"stream":"S","Creds":"/data/auth/worker.creds"}`, "Creds", `connector jetstream: config.Creds: unknown field: did you mean "creds"? (field names are case-sensitive)`},
		// encoding/json folds Unicode too: ſ (U+017F) matches s, K (U+212A) k.
		{false, "jetstream", `{"stream":"S","credſ":"/x"}`, "credſ", `connector jetstream: config.credſ: unknown field: did you mean "creds"? (field names are case-sensitive)`},
		{true, "jetstream", "{\"stream\":\"S\",\"subject\":\"s\",\"tls\u212aey\":\"/k\"}", "tls\u212aey", "connector jetstream: config.tls\u212aey: unknown field: did you mean \"tlsKey\"? (field names are case-sensitive)"},
		{true, "stdout", `{"Color":1}`, "Color", `connector stdout: config.Color: unknown field (the connector takes no configuration)`},
		{true, "jetstream", `{"url":" ","stream":"S","subject":"s"}`, "url", `connector jetstream: config.url: blank: leave it out to use the cluster's own NATS server`},
	} {
		var err error
		if tc.sink {
			err = ValidateSink(tc.connector, json.RawMessage(tc.config))
		} else {
			err = ValidateSource(tc.connector, json.RawMessage(tc.config))
		}
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s %s: error = %v, want a *ConfigError", tc.connector, tc.config, err)
			continue
		}
		if ce.Connector != tc.connector || ce.Field != tc.field {
			t.Errorf("%s %s: ConfigError{Connector: %q, Field: %q}, want %q, %q", tc.connector, tc.config, ce.Connector, ce.Field, tc.connector, tc.field)
		}
		if err.Error() != tc.want {
			t.Errorf("%s %s:\n got  %s\n want %s", tc.connector, tc.config, err, tc.want)
		}
	}
}

func TestStdoutNeedsWriter(t *testing.T) {
	if _, err := NewSink("stdout", nil, nil); err == nil || err.Error() != "connector stdout: no writer to write to" {
		t.Errorf("NewSink(stdout, nil writer) error = %v", err)
	}
	if _, err := NewSink("stdout", nil, io.Discard); err != nil {
		t.Errorf("NewSink(stdout) error = %v", err)
	}
}
