package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/strictjson"
)

// Source produces the records of one source subtask.
type Source interface {
	// Open prepares subtask `subtask` of `parallelism`.
	Open(ctx context.Context, subtask, parallelism int) error
	// Next appends up to max records to b (port 0) and returns the watermark
	// after them (abi.MinWatermark if none yet) and done=true when a bounded
	// input has ended (the last call may return records and done together).
	// It blocks at most until ctx is done, and then returns ctx.Err().
	Next(ctx context.Context, b *abi.Builder, max int) (watermark int64, done bool, err error)
	Close() error
}

// Sink consumes the records of one sink subtask.
type Sink interface {
	Open(ctx context.Context, subtask, parallelism int) error
	// Write takes an encoded abi batch; the sink does not retain it.
	Write(batch []byte) error
	// Close flushes and releases what Open acquired.
	Close() error
}

// Identified is implemented by connectors that name what they write after
// the job and vertex they belong to (the JetStream sink's message ids). The
// runtime calls SetIdentity before Open.
type Identified interface {
	SetIdentity(job, vertex string) error
}

// ErrUnknown is wrapped by the errors for a connector name that does not
// exist.
var ErrUnknown = errors.New("connector: unknown connector")

// ConfigError is a connector configuration that cannot be used. Field is the
// path of the offending field inside the configuration object ("" when the
// configuration as a whole is wrong).
type ConfigError struct {
	Connector string // connector name, e.g. "gen"
	Field     string // e.g. "keys"
	Message   string // e.g. "0 must be ≥ 1"
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return "connector " + e.Connector + ": config: " + e.Message
	}
	return "connector " + e.Connector + ": config." + e.Field + ": " + e.Message
}

// The connectors by name: each decodes its configuration into a
// sourceConfig or sinkConfig, which builds it.
var (
	sources = map[string]func(json.RawMessage) (Config, error){
		"gen":       decoder(parseGenConfig),
		"file":      decoder(parseFileSourceConfig),
		"jetstream": decoder(parseJSSourceConfig),
	}
	sinks = map[string]func(json.RawMessage) (Config, error){
		"stdout":    decoder(parseStdoutConfig),
		"file":      decoder(parseFileSinkConfig),
		"discard":   decoder(parseDiscardConfig),
		"jetstream": decoder(parseJSSinkConfig),
	}
)

// NewSource returns the source connector named connector, configured by
// config. The source is not open yet.
func NewSource(connector string, config json.RawMessage) (Source, error) {
	c, err := DecodeSource(connector, config)
	if err != nil {
		return nil, err
	}
	return NewSourceFrom(c)
}

// NewSink returns the sink connector named connector, configured by config.
// stdout is where the "stdout" sink writes (os.Stdout from the CLI). The sink
// is not open yet.
func NewSink(connector string, config json.RawMessage, stdout io.Writer) (Sink, error) {
	c, err := DecodeSink(connector, config)
	if err != nil {
		return nil, err
	}
	return NewSinkFrom(c, stdout)
}

// SourceNames returns the source connector names in lexical order.
func SourceNames() []string { return sortedKeys(sources) }

// SinkNames returns the sink connector names in lexical order.
func SinkNames() []string { return sortedKeys(sinks) }

// ValidateSource checks that name is a source connector and that config is a
// valid configuration for it. Configuration errors are *ConfigError.
func ValidateSource(name string, config json.RawMessage) error {
	_, err := NewSource(name, config)
	return err
}

// ValidateSink checks that name is a sink connector and that config is a
// valid configuration for it. Configuration errors are *ConfigError.
func ValidateSink(name string, config json.RawMessage) error {
	_, err := NewSink(name, config, io.Discard)
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// decodeConfig decodes a connector configuration strictly into dst, a
// pointer to a struct. Empty or null configuration leaves dst unchanged.
func decodeConfig(connector string, raw json.RawMessage, dst any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	// encoding/json would match "URL" to the field "url": names must be
	// exact, so that the value decoded is the one the text spells.
	if err := strictjson.Check(raw, reflect.TypeOf(dst)); err != nil {
		return nameError(connector, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return configDecodeError(connector, dst, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ConfigError{Connector: connector, Message: "unexpected data after the JSON object"}
	}
	return nil
}

// nameError is a ConfigError for a *strictjson.NameError.
func nameError(connector string, err error) error {
	var ne *strictjson.NameError
	if !errors.As(err, &ne) {
		return &ConfigError{Connector: connector, Message: err.Error()}
	}
	field := strings.Join(append(slices.Clone(ne.Path), ne.Name), ".")
	msg := ne.Message()
	if len(ne.Known) == 0 && !ne.Duplicate {
		msg = "unknown field (the connector takes no configuration)"
	}
	return &ConfigError{Connector: connector, Field: field, Message: msg}
}

func configDecodeError(connector string, dst any, err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return &ConfigError{Connector: connector, Message: "must be a JSON object, not " + typeErr.Value}
		}
		return &ConfigError{Connector: connector, Field: typeErr.Field,
			Message: "JSON " + typeErr.Value + " is not a valid " + typeName(typeErr.Type)}
	case errors.As(err, &syntaxErr):
		return &ConfigError{Connector: connector, Message: "invalid JSON at byte " + strconv.FormatInt(syntaxErr.Offset, 10) + ": " + syntaxErr.Error()}
	}
	// encoding/json reports unknown fields with an untyped error.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if u, uerr := strconv.Unquote(name); uerr == nil {
			name = u
		}
		known := jsonFields(dst)
		if len(known) == 0 {
			return &ConfigError{Connector: connector, Field: name, Message: "unknown field (the connector takes no configuration)"}
		}
		return &ConfigError{Connector: connector, Field: name, Message: "unknown field (known: " + strings.Join(known, ", ") + ")"}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &ConfigError{Connector: connector, Message: "truncated JSON"}
	}
	return &ConfigError{Connector: connector, Message: err.Error()}
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	}
	return t.String()
}

// jsonFields lists the JSON field names of the struct dst points to.
func jsonFields(dst any) []string {
	t := reflect.TypeOf(dst).Elem()
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// checkMin returns a ConfigError when v < min.
func checkMin(connector, field string, v, min int64) error {
	if v < min {
		return &ConfigError{Connector: connector, Field: field, Message: fmt.Sprintf("%d must be ≥ %d", v, min)}
	}
	return nil
}

// checkRange returns a ConfigError when v is outside [min, max].
func checkRange(connector, field string, v, min, max int64) error {
	if v < min || v > max {
		return &ConfigError{Connector: connector, Field: field, Message: fmt.Sprintf("%d must be in [%d, %d]", v, min, max)}
	}
	return nil
}

// checkSubtask validates the arguments of Open.
func checkSubtask(what string, subtask, parallelism int) error {
	if parallelism < 1 || subtask < 0 || subtask >= parallelism {
		return fmt.Errorf("%s: open: subtask %d of parallelism %d is out of range", what, subtask, parallelism)
	}
	return nil
}

// watermark is the watermark after a subtask emitted timestamps up to maxTs
// with the given delay: maxTs − delay − 1, saturating at abi.MinWatermark.
func watermark(maxTs, delay int64) int64 {
	if maxTs < abi.MinWatermark+delay+1 {
		return abi.MinWatermark
	}
	return maxTs - delay - 1
}
