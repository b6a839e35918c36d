package main

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// Exit statuses, the same for every command (docs/cli.md).
const (
	exitOK     = 0
	exitFailed = 1 // the job or the command failed
	exitUsage  = 2 // the command line is wrong
	// exitSuspended: the job was cancelled or suspended from outside, or
	// suspended with a savepoint by this client's signal (deploy --resume
	// continues it).
	exitSuspended = 3
)

// usageErrors makes every command answer a flag it cannot parse with one
// line and a pointer to its --help (exit 2), rather than urfave/cli's
// "Incorrect Usage" and the whole help text.
func usageErrors(cmds []*cli.Command, parent string) {
	for _, cmd := range cmds {
		name := strings.TrimSpace(parent + " " + cmd.Name)
		usageErrors(cmd.Subcommands, name)
		cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
			return usageError{fmt.Errorf("%s: %s (see wstream %s --help)", name, flagMessage(cmd, err), name)}
		}
	}
}

// badValue is flag's error for a value it cannot parse.
var badValue = regexp.MustCompile(`^invalid value "(.*)" for flag -(\S+): (.*)$`)

// flagMessage rewrites the flag package's "invalid value "5" for flag
// -checkpoint-interval: parse error" into what the flag wants.
func flagMessage(cmd *cli.Command, err error) string {
	msg := err.Error()
	if m := badValue.FindStringSubmatch(msg); m != nil {
		value, name := m[1], m[2]
		dashes := "--"
		if len(name) == 1 {
			dashes = "-"
		}
		want := m[3]
		for _, f := range cmd.Flags {
			if !hasName(f, name) {
				continue
			}
			switch f.(type) {
			case *cli.DurationFlag:
				want = "want a duration with its unit, such as 500ms, 5s or 2m"
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
				want = "want a whole number"
			case *cli.Float64Flag:
				want = "want a number"
			case *cli.BoolFlag:
				want = "want true or false"
			}
		}
		return fmt.Sprintf("%s%s %s: %s", dashes, name, value, want)
	}
	if rest, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		dashes := "--"
		if len(rest) == 1 {
			dashes = "-"
		}
		return fmt.Sprintf("no flag %s%s", dashes, rest)
	}
	return msg
}

func hasName(f cli.Flag, name string) bool {
	for _, n := range f.Names() {
		if n == name {
			return true
		}
	}
	return false
}

// dropMessages is a log handler that leaves out the records with message
// msg: what the command reports in its own words.
type dropMessages struct {
	slog.Handler
	msg string
}

func (h dropMessages) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropMessages) WithAttrs(attrs []slog.Attr) slog.Handler {
	return dropMessages{h.Handler.WithAttrs(attrs), h.msg}
}

func (h dropMessages) WithGroup(name string) slog.Handler {
	return dropMessages{h.Handler.WithGroup(name), h.msg}
}
