package connector

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Config is a connector's decoded and validated configuration: what
// NewSourceFrom and NewSinkFrom build the connector from, so that a check
// of it (a tenant's, say) inspects the very values the connector uses.
type Config interface {
	// Connector is the connector's name ("jetstream").
	Connector() string
	// Reach lists what the configuration reaches beyond the job owner's
	// own account, one entry per field that names it: a NATS server,
	// credentials or TLS files, a file of the host, the host's terminal.
	// Empty for a configuration that stays within the account.
	Reach() []Reach
}

// Reach is one thing a configuration reaches beyond the job owner's own
// account.
type Reach struct {
	// Field is the configuration field that names it ("url"), "" when the
	// connector itself does (stdout: the host's terminal).
	Field string
	// What it is, for messages: "a NATS server", "a file of the host", ….
	What string
}

// What a Reach is.
const (
	ReachServer     = "a NATS server"
	ReachCredential = "credentials for a NATS server"
	ReachHostFile   = "a file of the host"
	ReachTerminal   = "the host's terminal"
)

// sourceConfig and sinkConfig are the decoded configurations of sources and
// sinks: each builds its connector.
type (
	sourceConfig interface {
		Config
		source() (Source, error)
	}
	sinkConfig interface {
		Config
		sink(stdout io.Writer) (Sink, error)
	}
)

// DecodeSource decodes and validates the configuration of source connector
// name. Configuration errors are *ConfigError; an unknown name wraps
// ErrUnknown.
func DecodeSource(name string, config json.RawMessage) (Config, error) {
	f, ok := sources[name]
	if !ok {
		return nil, fmt.Errorf("%w: no source named %q (known: %s)", ErrUnknown, name, strings.Join(SourceNames(), ", "))
	}
	return f(config)
}

// DecodeSink decodes and validates the configuration of sink connector
// name, as DecodeSource.
func DecodeSink(name string, config json.RawMessage) (Config, error) {
	f, ok := sinks[name]
	if !ok {
		return nil, fmt.Errorf("%w: no sink named %q (known: %s)", ErrUnknown, name, strings.Join(SinkNames(), ", "))
	}
	return f(config)
}

// NewSourceFrom builds the source that c, from DecodeSource, configures.
// The source is not open yet.
func NewSourceFrom(c Config) (Source, error) {
	sc, ok := c.(sourceConfig)
	if !ok || c == nil {
		return nil, fmt.Errorf("connector: %T is no source configuration", c)
	}
	return sc.source()
}

// NewSinkFrom builds the sink that c, from DecodeSink, configures; stdout
// is where the "stdout" sink writes. The sink is not open yet.
func NewSinkFrom(c Config, stdout io.Writer) (Sink, error) {
	sc, ok := c.(sinkConfig)
	if !ok || c == nil {
		return nil, fmt.Errorf("connector: %T is no sink configuration", c)
	}
	return sc.sink(stdout)
}

// decoder adapts a connector's parse function to the registries.
func decoder[C Config](parse func(json.RawMessage) (C, error)) func(json.RawMessage) (Config, error) {
	return func(raw json.RawMessage) (Config, error) {
		c, err := parse(raw)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// reachOf lists the set fields among fields, each reaching what.
func reachOf(what string, fields ...[2]string) []Reach {
	var out []Reach
	for _, f := range fields {
		if f[1] != "" {
			out = append(out, Reach{Field: f[0], What: what})
		}
	}
	return out
}
