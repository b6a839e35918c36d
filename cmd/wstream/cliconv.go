package main

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// defaultInUsage is a default written into a flag's usage text, where the
// flag's own value cannot express it (a default that comes from elsewhere,
// or that a zero value stands for).
var defaultInUsage = regexp.MustCompile(`\s*\(default:? ([^)]*)\)`)

// tidyDefaults moves a "(default X)" out of each flag's usage into its
// default text, so that help shows one default per flag: urfave/cli would
// otherwise add "(default: 0)" from the flag's zero value after it.
func tidyDefaults(cmds []*cli.Command) {
	for _, cmd := range cmds {
		tidyDefaults(cmd.Subcommands)
		for _, f := range cmd.Flags {
			v := reflect.ValueOf(f)
			if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
				continue
			}
			usage, text := v.Elem().FieldByName("Usage"), v.Elem().FieldByName("DefaultText")
			if !usage.IsValid() || !text.IsValid() || usage.Kind() != reflect.String || text.Kind() != reflect.String || text.String() != "" {
				continue
			}
			m := defaultInUsage.FindStringSubmatchIndex(usage.String())
			if m == nil {
				continue
			}
			u := usage.String()
			usage.SetString(strings.TrimSpace(u[:m[0]] + u[m[1]:]))
			text.SetString(u[m[2]:m[3]])
		}
	}
}

// commandNotFound answers a command that does not exist with the closest
// one, as a usage error (exit 2).
func commandNotFound(c *cli.Context, name string) {
	// Within a command with subcommands (wstream tenant ls), its own.
	parent, cmds := "wstream", c.App.Commands
	if c.Command != nil && c.Command.Name != c.App.Name && len(c.Command.Subcommands) > 0 {
		parent, cmds = "wstream "+c.Command.Name, c.Command.Subcommands
	}
	msg := fmt.Sprintf("%q is not a %s command", name, parent)
	best, dist := "", 3 // suggest only what is at most two edits away
	for _, cmd := range cmds {
		for _, n := range cmd.Names() {
			if d := editDistance(name, n); d < dist || (d == dist && strings.HasPrefix(n, name)) {
				best, dist = n, d
			}
			if best == "" && len(name) >= 2 && strings.HasPrefix(n, name) {
				best = n
			}
		}
	}
	if best != "" {
		msg += fmt.Sprintf("; did you mean %q?", best)
	}
	notFound = usageError{fmt.Errorf("%s (see %s --help)", msg, parent)}
}

// editDistance is the Levenshtein distance of a and b, counting a swap of
// two adjacent letters ("lsit") as one edit.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// notFound is the error commandNotFound leaves for run: urfave/cli's
// CommandNotFound returns nothing.
var notFound error

// outputFlag chooses between a table for people and JSON for programs.
var outputFlag = &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "`FORMAT` of the output: table or json", Value: "table"}

// jsonOutput reports whether -o asks for JSON; another format than table
// or json is a usage error.
func jsonOutput(c *cli.Context) (bool, error) {
	switch f := c.String("output"); f {
	case "table":
		return false, nil
	case "json":
		return true, nil
	default:
		return false, usageError{fmt.Errorf("%s: -o %q: the formats are table and json", c.Command.FullName(), f)}
	}
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// orEmpty keeps an empty list an empty JSON array rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// flagsFirst moves the flags of a command line that come after its
// arguments in front of them (wstream deploy job.wasm -p 4 is wstream
// deploy -p 4 job.wasm): urfave/cli stops reading flags at the first
// argument and would take the rest as arguments. A flag's value is the next
// word unless the flag is a boolean or written --flag=value; "--" ends the
// flags, as usual.
func flagsFirst(app *cli.App, args []string) []string {
	// A completion request must stay last, where urfave/cli looks for it.
	if len(args) < 2 || args[len(args)-1] == "--generate-bash-completion" {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	// Global flags, then the command (and subcommand) names.
	cmds := app.Commands
	flags := app.Flags
	found := false
	for len(rest) > 0 {
		w := rest[0]
		if strings.HasPrefix(w, "-") {
			n := flagWords(flags, w)
			n = min(n, len(rest))
			out = append(out, rest[:n]...)
			rest = rest[n:]
			continue
		}
		var cmd *cli.Command
		for _, c := range cmds {
			if c.HasName(w) {
				cmd = c
			}
		}
		if cmd == nil {
			if !found {
				return args // no command: urfave/cli reports it
			}
			break
		}
		found = true
		out = append(out, w)
		rest = rest[1:]
		cmds, flags = cmd.Subcommands, cmd.Flags
		if len(cmd.Subcommands) == 0 {
			break
		}
	}
	var flagArgs, positional []string
	for len(rest) > 0 {
		w := rest[0]
		if w == "--" {
			positional = append(positional, rest...)
			break
		}
		if strings.HasPrefix(w, "-") && w != "-" {
			n := min(flagWords(flags, w), len(rest))
			flagArgs = append(flagArgs, rest[:n]...)
			rest = rest[n:]
			continue
		}
		positional = append(positional, w)
		rest = rest[1:]
	}
	out = append(out, flagArgs...)
	return append(out, positional...)
}

// flagWords is how many words the flag w takes from the command line: 1
// for a boolean, a --flag=value or an unknown flag (urfave/cli reports
// it), else 2.
func flagWords(flags []cli.Flag, w string) int {
	name := strings.TrimLeft(w, "-")
	if strings.Contains(name, "=") {
		return 1
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if _, ok := f.(*cli.BoolFlag); ok {
				return 1
			}
			return 2
		}
	}
	return 1
}

// flagCategories groups the flags of help by what they are about: deploy
// alone has fifty.
var flagCategories = map[string][]string{
	"Job and plan":   {"plan", "parallelism", "vertex-parallelism", "max-parallelism", "source", "sink", "name", "tenant", "dry-run"},
	"Where to start": {"from-savepoint", "allow-non-restored-state", "resume"},
	"Checkpoints": {"checkpoint-interval", "checkpoint-mode", "aligned-timeout", "checkpoint-timeout", "min-pause",
		"max-concurrent-checkpoints", "tolerable-failures", "retain", "incremental", "local-recovery", "savepoint-format",
		"checkpoint-storage", "compression", "checkpoint-history"},
	"Restarts":     {"restart", "restart-attempts", "restart-delay", "restart-max-delay"},
	"Guest errors": {"on-guest-error", "max-dead-letters"},
	"Cluster and data": {"nats", "nats-creds", "nats-nkey", "nats-user", "nats-password", "nats-token", "nats-tls-ca",
		"nats-tls-cert", "nats-tls-key", "data", "detach", "attached", "workers", "listen", "http", "auth-dir", "tenants", "worker-timeout", "id", "slots"},
	"Output": {"quiet", "verbose", "log-format", "log-level", "output", "cpuprofile"},
}

// categorize sets the category of the flags of commands with many flags;
// the sandbox's limits (hostFlags) form one of their own.
func categorize(cmds []*cli.Command) {
	of := map[string]string{}
	for cat, names := range flagCategories {
		for _, n := range names {
			of[n] = cat
		}
	}
	for _, f := range hostFlags() {
		if _, ok := of[f.Names()[0]]; !ok {
			of[f.Names()[0]] = "Sandbox limits"
		}
	}
	for _, cmd := range cmds {
		categorize(cmd.Subcommands)
		if len(cmd.Flags) < 12 {
			continue
		}
		for _, f := range cmd.Flags {
			cat, ok := of[f.Names()[0]]
			if !ok {
				continue
			}
			if c := reflect.ValueOf(f).Elem().FieldByName("Category"); c.IsValid() && c.Kind() == reflect.String && c.String() == "" {
				c.SetString(cat)
			}
		}
	}
}

// humanBytes writes n bytes for people, in one word (tables are split on
// spaces by scripts): 512B, 194.3KiB, 12.0MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%.1f%s", v, suffix)
}
