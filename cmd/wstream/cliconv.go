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
	msg := fmt.Sprintf("%q is not a wstream command", name)
	best, dist := "", 3 // suggest only what is at most two edits away
	for _, cmd := range c.App.Commands {
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
	notFound = usageError{fmt.Errorf("%s (see wstream --help)", msg)}
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
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
		}
		prev, cur = cur, prev
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
