package connector

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// configKinds are every connector with the Go type its configuration
// decodes into and a valid configuration to add fields to.
var configKinds = []struct {
	sink bool
	name string
	typ  reflect.Type
	base map[string]any
}{
	{false, "gen", reflect.TypeFor[genConfig](), map[string]any{}},
	{false, "file", reflect.TypeFor[fileSourceConfig](), map[string]any{"path": "in.txt"}},
	{false, "jetstream", reflect.TypeFor[jsSourceConfig](), map[string]any{"url": "nats://h:4222", "stream": "S"}},
	{true, "stdout", reflect.TypeFor[stdoutConfig](), map[string]any{}},
	{true, "file", reflect.TypeFor[fileSinkConfig](), map[string]any{"path": "out.txt"}},
	{true, "discard", reflect.TypeFor[discardConfig](), map[string]any{}},
	{true, "jetstream", reflect.TypeFor[jsSinkConfig](), map[string]any{"url": "nats://h:4222", "stream": "S", "subject": "s"}},
}

func TestConfigKindsCoverRegistries(t *testing.T) {
	var srcs, snks []string
	for _, k := range configKinds {
		if k.sink {
			snks = append(snks, k.name)
		} else {
			srcs = append(srcs, k.name)
		}
	}
	slices.Sort(srcs)
	slices.Sort(snks)
	if !slices.Equal(srcs, SourceNames()) || !slices.Equal(snks, SinkNames()) {
		t.Fatalf("the table names sources %v and sinks %v; the registries %v and %v", srcs, snks, SourceNames(), SinkNames())
	}
}

// spellings returns name in other cases: lower, UPPER, Title, and mixed
// ones; name itself is not among them.
func spellings(name string) []string {
	r := []rune(name)
	alt := func(odd bool) string {
		out := make([]rune, len(r))
		for i, c := range r {
			if (i%2 == 1) == odd {
				out[i] = unicode.ToUpper(c)
			} else {
				out[i] = unicode.ToLower(c)
			}
		}
		return string(out)
	}
	swapFirst := string(unicode.ToUpper(r[0])) + string(r[1:])
	if unicode.IsUpper(r[0]) {
		swapFirst = string(unicode.ToLower(r[0])) + string(r[1:])
	}
	set := map[string]bool{}
	for _, s := range []string{strings.ToLower(name), strings.ToUpper(name), swapFirst,
		string(unicode.ToUpper(r[0])) + strings.ToLower(string(r[1:])), alt(true), alt(false),
		strings.ToUpper(name[:len(name)-1]) + strings.ToLower(name[len(name)-1:])} {
		if s != name {
			set[s] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// sample is a value of a field's type that its connector accepts, where
// one is easy to give.
func sample(field string, t reflect.Type) any {
	switch field {
	case "key":
		return "subject"
	case "timestamp":
		return "stream"
	case "format":
		return "tsv"
	case "subject":
		return "s.x"
	case "url":
		return "nats://other:4222"
	case "staging":
		return "stage"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "v"
	case reflect.Bool:
		return true
	default:
		return 2
	}
}

func decodeKind(sink bool, name string, cfg map[string]any) (Config, error) {
	raw, _ := json.Marshal(cfg)
	if sink {
		return DecodeSink(name, raw)
	}
	return DecodeSource(name, raw)
}

// TestFieldNamesExact: every field of every connector's configuration, in
// every other case, is refused with an error naming the field as written
// and the right spelling, whether or not the exact spelling is there
// too; in its exact spelling it decodes into the field.
func TestFieldNamesExact(t *testing.T) {
	for _, k := range configKinds {
		for _, field := range fieldNames(k.typ) {
			f := fieldByName(k.typ, field)
			v := sample(field, f.Type)
			cfg := maps.Clone(k.base)
			cfg[field] = v
			c, err := decodeKind(k.sink, k.name, cfg)
			var ce *ConfigError
			if errors.As(err, &ce) && strings.Contains(ce.Message, "unknown field") {
				t.Errorf("%s %s: exact %q refused: %v", k.name, kindWord(k.sink), field, err)
			}
			if err == nil && reflect.TypeOf(c) == k.typ {
				got := reflect.ValueOf(c).FieldByIndex(f.Index)
				for got.Kind() == reflect.Pointer {
					got = got.Elem()
				}
				if want := reflect.ValueOf(v); got.Kind() == want.Kind() && !got.Equal(want) {
					t.Errorf("%s %s: exact %q = %v decoded as %v", k.name, kindWord(k.sink), field, v, got)
				}
			}
			for _, s := range spellings(field) {
				for _, withExact := range []bool{false, true} {
					cfg := maps.Clone(k.base)
					if withExact {
						cfg[field] = v
					}
					cfg[s] = v
					_, err := decodeKind(k.sink, k.name, cfg)
					var ce *ConfigError
					if !errors.As(err, &ce) || ce.Connector != k.name || ce.Field != s ||
						!strings.Contains(ce.Message, `did you mean "`+field+`"?`) || !strings.Contains(ce.Message, "case-sensitive") {
						t.Errorf("%s %s: %q (exact too: %v): error %v, want config.%s refused with the spelling %q", k.name, kindWord(k.sink), s, withExact, err, s, field)
					}
				}
			}
		}
	}
}

func kindWord(sink bool) string {
	if sink {
		return "sink"
	}
	return "source"
}

func fieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

func fieldByName(t reflect.Type, name string) reflect.StructField {
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return t.Field(i)
		}
	}
	panic("no field " + name)
}

func TestSpellings(t *testing.T) {
	got := spellings("tlsCA")
	for _, want := range []string{"tlsca", "TLSCA", "TlsCA", "Tlsca", "TlScA", "tLsCa", "TLSCa"} {
		if !slices.Contains(got, want) {
			t.Errorf("spellings(tlsCA) = %v, missing %q", got, want)
		}
	}
	if slices.Contains(got, "tlsCA") {
		t.Errorf("spellings(tlsCA) holds the name itself")
	}
}

// connectionFields are the jetstream connectors' fields that reach beyond
// the cluster's own server; every other field stays within the account.
var connectionFields = []string{"creds", "nkey", "password", "tlsCA", "tlsCert", "tlsKey", "token", "url", "user"}

// TestReach: a configuration reaches exactly what its set fields name.
// Every field of the jetstream configurations is either a connection
// field, reported when set, or not, and never reported: a field added to
// either struct must be classified here.
func TestReach(t *testing.T) {
	inAccount := map[string][]string{
		"source": {"bounded", "key", "keyHeader", "stream", "subject", "timestamp", "timestampHeader", "watermarkDelay"},
		"sink":   {"create", "duplicateWindow", "keyHeader", "maxTransactionBytes", "staging", "stream", "subject", "timestampHeader"},
	}
	for _, k := range configKinds {
		if k.name != "jetstream" {
			continue
		}
		for _, field := range fieldNames(k.typ) {
			conn := slices.Contains(connectionFields, field)
			if !conn && !slices.Contains(inAccount[kindWord(k.sink)], field) {
				t.Errorf("jetstream %s: field %q is neither a connection field nor one within the account", kindWord(k.sink), field)
				continue
			}
			cfg := maps.Clone(k.base)
			cfg[field] = sample(field, fieldByName(k.typ, field).Type)
			if field == "password" {
				cfg["user"] = "u"
			}
			if field == "tlsCert" || field == "tlsKey" {
				cfg["tlsCert"], cfg["tlsKey"] = "c", "k"
			}
			c, err := decodeKind(k.sink, k.name, cfg)
			if err != nil {
				t.Errorf("jetstream %s with %s: %v", kindWord(k.sink), field, err)
				continue
			}
			reached := map[string]string{}
			for _, r := range c.Reach() {
				reached[r.Field] = r.What
			}
			if reached["url"] != ReachServer {
				t.Errorf("jetstream %s with url: Reach %v, want url as %q", kindWord(k.sink), c.Reach(), ReachServer)
			}
			if _, ok := reached[field]; ok != conn {
				t.Errorf("jetstream %s with %s: Reach %v: reported %v, want %v", kindWord(k.sink), field, c.Reach(), ok, conn)
			}
		}
		// Without url, within the account: nothing.
		cfg := maps.Clone(k.base)
		delete(cfg, "url")
		c, err := decodeKind(k.sink, k.name, cfg)
		if err != nil || len(c.Reach()) != 0 {
			t.Errorf("jetstream %s without url: %v, Reach %v, want none", kindWord(k.sink), err, c.Reach())
		}
		// An empty url is no url: the connector uses the cluster's server.
		cfg["url"] = ""
		if c, err := decodeKind(k.sink, k.name, cfg); err != nil || len(c.Reach()) != 0 {
			t.Errorf("jetstream %s with url \"\": %v, want none reached", kindWord(k.sink), err)
		}
	}
	for _, tc := range []struct {
		sink bool
		name string
		cfg  string
		want []Reach
	}{
		{false, "gen", `{"count":1}`, nil},
		{true, "discard", ``, nil},
		{false, "file", `{"path":"/etc/passwd"}`, []Reach{{"path", ReachHostFile}}},
		{true, "file", `{"path":"/tmp/x"}`, []Reach{{"path", ReachHostFile}}},
		{true, "stdout", ``, []Reach{{"", ReachTerminal}}},
	} {
		var c Config
		var err error
		if tc.sink {
			c, err = DecodeSink(tc.name, json.RawMessage(tc.cfg))
		} else {
			c, err = DecodeSource(tc.name, json.RawMessage(tc.cfg))
		}
		if err != nil || !slices.Equal(c.Reach(), tc.want) || c.Connector() != tc.name {
			t.Errorf("%s %s: %v, Reach %v, want %v", tc.name, tc.cfg, err, c, tc.want)
		}
	}
}

// TestBuildFromDecoded: the connector built from a decoded configuration
// is the one configured, and a configuration of the wrong kind is refused.
func TestBuildFromDecoded(t *testing.T) {
	c, err := DecodeSource("jetstream", json.RawMessage(`{"stream":"S","subject":"a.>"}`))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSourceFrom(c)
	if err != nil {
		t.Fatal(err)
	}
	if js, ok := src.(*jsSource); !ok || js.cfg.Stream != "S" || js.cfg.Subject != "a.>" || js.cfg.URL != "" {
		t.Errorf("NewSourceFrom = %#v", src)
	}
	if _, err := NewSinkFrom(c, io.Discard); err == nil {
		t.Error("NewSinkFrom(a source's config) did not fail")
	}
	d, err := DecodeSink("discard", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSourceFrom(d); err == nil {
		t.Error("NewSourceFrom(a sink's config) did not fail")
	}
	if _, err := NewSourceFrom(nil); err == nil {
		t.Error("NewSourceFrom(nil) did not fail")
	}
	for _, name := range SourceNames() {
		if _, err := DecodeSource(name, json.RawMessage(`{"Path":"x"}`)); err == nil {
			t.Errorf("source %s took Path", name)
		}
	}
}
