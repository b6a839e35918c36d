// Package logging builds the structured loggers (log/slog) of wstream's
// processes and adapts the loggers of the parts that have their own: guest
// log lines and the embedded NATS server.
//
// Every line carries the ids it concerns as attributes, under fixed keys
// (Job, Vertex, Subtask, Checkpoint, Worker, Tenant, Attempt), so that
// `--log-format json` output can be filtered by them.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/wstream/wstream/abi"
)

// Attribute keys shared by every component.
const (
	Job        = "job"
	Attempt    = "attempt"
	Vertex     = "vertex"
	Subtask    = "subtask"
	Checkpoint = "checkpoint"
	Worker     = "worker"
	Tenant     = "tenant"
	Component  = "component"
)

// Discard is a logger that writes nothing: the default of every Config
// that takes one.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// OrDiscard returns l, or Discard when l is nil.
func OrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return Discard()
	}
	return l
}

// ParseLevel reads a level name as the command line gives it.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
}

// New returns a logger writing to w in format "text" or "json" at level
// and above.
func New(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	o := &slog.HandlerOptions{Level: level}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// GuestLevel maps a guest's log level (abi.LogDebug … abi.LogError) to
// slog's.
func GuestLevel(level int32) slog.Level {
	switch {
	case level <= abi.LogDebug:
		return slog.LevelDebug
	case level == abi.LogInfo:
		return slog.LevelInfo
	case level == abi.LogWarn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// NATS adapts l to the embedded NATS server's logger interface. Its
// warnings and errors keep their level; its notices (a start-up banner of
// thirty lines, each listener) are below debug, so no --log-level shows
// them: they describe a server the user did not start by hand.
func NATS(l *slog.Logger) *NATSLogger {
	return &NATSLogger{l: l.With(Component, "nats")}
}

// NATSLogger is the adapter NATS returns.
type NATSLogger struct{ l *slog.Logger }

func (n *NATSLogger) log(level slog.Level, format string, v []any) {
	if !n.l.Enabled(context.Background(), level) {
		return
	}
	n.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (n *NATSLogger) Noticef(format string, v ...any) { n.log(slog.LevelDebug-4, format, v) }
func (n *NATSLogger) Warnf(format string, v ...any)   { n.log(slog.LevelWarn, format, v) }
func (n *NATSLogger) Errorf(format string, v ...any)  { n.log(slog.LevelError, format, v) }
func (n *NATSLogger) Fatalf(format string, v ...any)  { n.log(slog.LevelError, format, v) }
func (n *NATSLogger) Debugf(format string, v ...any)  { n.log(slog.LevelDebug-4, format, v) }
func (n *NATSLogger) Tracef(format string, v ...any)  { n.log(slog.LevelDebug-8, format, v) }
