package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// A context is a named set of the flags that say which cluster a command
// talks to and as whom, kept in a file under the user's configuration
// directory, as nats' contexts are: one `wstream context select prod` and
// every command reaches prod without repeating --nats and credentials.
// Precedence: a flag given, then its environment variable, then the
// context's value; a --nats that names another cluster leaves the context
// out altogether.

// contextKeys are the settings a context keeps: flags of the commands
// (applied where a command has the flag), and the REST API's URL and token
// for programs that read the file (wstream context ls shows them).
var contextKeys = []struct{ name, usage string }{
	{"nats", "NATS server `URL` of the cluster"},
	{"nats-creds", "NATS credentials `FILE`"},
	{"nats-nkey", "NATS nkey seed `FILE`"},
	{"nats-user", "NATS user name"},
	{"nats-password", "NATS password"},
	{"nats-token", "NATS authentication token"},
	{"nats-tls-ca", "CA certificate `FILE` of the NATS server"},
	{"nats-tls-cert", "client certificate `FILE` for NATS TLS"},
	{"nats-tls-key", "client private key `FILE` for NATS TLS"},
	{"data", "data `DIR` (a local deploy's, or the server's on this host: its admin credentials)"},
	{"server", "`URL` of the server's web UI and REST API"},
	{"token", "REST API token (the admin's is in DATA/auth/admin.token)"},
}

// fileKeys are settings that name files: kept absolute, so that the
// context works from any directory.
var fileKeys = []string{"nats-creds", "nats-nkey", "nats-tls-ca", "nats-tls-cert", "nats-tls-key", "data"}

// secretKeys are not shown by context ls.
var secretKeys = []string{"nats-password", "nats-token", "token"}

type contextFile struct {
	Current  string                       `json:"current,omitempty"`
	Contexts map[string]map[string]string `json:"contexts"`
}

var contextFlag = &cli.StringFlag{Name: "context", Usage: "use the settings of context `NAME` (wstream context ls) instead of the selected one", EnvVars: []string{"WSTREAM_CONTEXT"}}

// contextPath is the file of the contexts: $WSTREAM_CONFIG, else
// wstream/contexts.json in the user's configuration directory
// ($XDG_CONFIG_HOME or ~/.config on Linux).
func contextPath() (string, error) {
	if p := os.Getenv("WSTREAM_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("contexts: %w (set WSTREAM_CONFIG to a file)", err)
	}
	return filepath.Join(dir, "wstream", "contexts.json"), nil
}

func readContexts() (*contextFile, string, error) {
	path, err := contextPath()
	if err != nil {
		return nil, "", err
	}
	f := &contextFile{Contexts: map[string]map[string]string{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, path, nil
	}
	if err != nil {
		return nil, path, err
	}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	if f.Contexts == nil {
		f.Contexts = map[string]map[string]string{}
	}
	return f, path, nil
}

func writeContexts(f *contextFile, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(f, "", "  ")
	// Credentials: readable by the user alone.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// withContexts makes every command that talks to a cluster take the
// settings of the chosen context for the flags it was not given.
func withContexts(cmds []*cli.Command) {
	for _, cmd := range cmds {
		switch cmd.Name {
		case "context", "server", "init", "build", "completion", "version":
			// server: --nats there is the NATS server it runs on, not a
			// cluster to reach.
			continue
		}
		withContexts(cmd.Subcommands)
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			if err := applyContext(c); err != nil {
				return err
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
	}
}

// chosenContext is the settings of the context --context names, or of the
// selected one; nil when there is none.
func chosenContext(c *cli.Context) (map[string]string, string, error) {
	name := lineageString(c, "context")
	if name == "" {
		name = os.Getenv("WSTREAM_CONTEXT")
	}
	f, path, err := readContexts()
	if err != nil {
		return nil, "", err
	}
	if name == "" {
		name = f.Current
		if name == "" {
			return nil, "", nil
		}
	}
	ctx, ok := f.Contexts[name]
	if !ok {
		return nil, "", usageError{fmt.Errorf("no context %q in %s (wstream context ls)", name, path)}
	}
	return ctx, name, nil
}

func applyContext(c *cli.Context) error {
	ctx, _, err := chosenContext(c)
	if err != nil || ctx == nil {
		return err
	}
	// --nats (or $WSTREAM_NATS) naming another cluster: the context's
	// credentials are not that cluster's.
	if c.IsSet("nats") && c.String("nats") != ctx["nats"] {
		return nil
	}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		v, ok := ctx[name]
		if !ok || v == "" || c.IsSet(name) {
			continue
		}
		if err := c.Set(name, v); err != nil {
			return fmt.Errorf("context: --%s %s: %w", name, v, err)
		}
	}
	return nil
}

func contextCommand() *cli.Command {
	var addFlags []cli.Flag
	for _, k := range contextKeys {
		addFlags = append(addFlags, &cli.StringFlag{Name: k.name, Usage: k.usage})
	}
	addFlags = append(addFlags, &cli.BoolFlag{Name: "select", Usage: "select the context as well"})
	return &cli.Command{
		Name:  "context",
		Usage: "manage named cluster settings (NATS URL, credentials, data dir) that every command uses",
		Description: `A context keeps --nats, the NATS credentials and TLS files, --data, and the
REST API's URL and token under a name, in wstream/contexts.json of the user's
configuration directory ($XDG_CONFIG_HOME, else ~/.config; $WSTREAM_CONFIG names
another file). Every command that reaches a cluster takes the selected context's
settings, or those of --context NAME ($WSTREAM_CONTEXT), for the flags it is not
given: a flag wins over its environment variable, which wins over the context.`,
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "add a context, or replace one of the same name",
				ArgsUsage: "NAME",
				Flags:     addFlags,
				Action:    addContext,
			},
			{
				Name:      "select",
				Usage:     "make a context the one commands use (--none: none)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "none", Usage: "select no context"}},
				BashComplete: func(c *cli.Context) {
					completeContexts(c.App.Writer)
				},
				Action: selectContext,
			},
			{
				Name:    "ls",
				Aliases: []string{"list"},
				Usage:   "list the contexts; * marks the selected one",
				Flags:   []cli.Flag{outputFlag},
				Action: func(c *cli.Context) error {
					asJSON, err := jsonOutput(c)
					if err != nil {
						return err
					}
					f, _, err := readContexts()
					if err != nil {
						return err
					}
					return printContexts(c.App.Writer, f, asJSON)
				},
			},
			{
				Name:      "rm",
				Aliases:   []string{"remove"},
				Usage:     "remove a context",
				ArgsUsage: "NAME",
				BashComplete: func(c *cli.Context) {
					completeContexts(c.App.Writer)
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError{fmt.Errorf("context rm: want one NAME argument, got %d", c.NArg())}
					}
					f, path, err := readContexts()
					if err != nil {
						return err
					}
					name := c.Args().First()
					if _, ok := f.Contexts[name]; !ok {
						return fmt.Errorf("no context %q in %s", name, path)
					}
					delete(f.Contexts, name)
					if f.Current == name {
						f.Current = ""
					}
					return writeContexts(f, path)
				},
			},
		},
	}
}

// printContexts lists the contexts with their settings, secrets hidden.
func printContexts(w io.Writer, f *contextFile, asJSON bool) error {
	names := make([]string, 0, len(f.Contexts))
	for n := range f.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	shown := func(ctx map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range ctx {
			if slices.Contains(secretKeys, k) {
				v = "***"
			}
			out[k] = v
		}
		return out
	}
	if asJSON {
		type row struct {
			Name     string            `json:"name"`
			Selected bool              `json:"selected"`
			Settings map[string]string `json:"settings"`
		}
		rows := []row{}
		for _, n := range names {
			rows = append(rows, row{n, n == f.Current, shown(f.Contexts[n])})
		}
		// One object, as every -o json prints: {"contexts": [...]}.
		return writeJSON(w, struct {
			Contexts []row `json:"contexts"`
		}{rows})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tNAME\tSETTINGS")
	for _, n := range names {
		mark := ""
		if n == f.Current {
			mark = "*"
		}
		var parts []string
		s := shown(f.Contexts[n])
		for _, k := range contextKeys {
			if v, ok := s[k.name]; ok {
				parts = append(parts, "--"+k.name+" "+v)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, n, strings.Join(parts, " "))
	}
	return tw.Flush()
}

func completeContexts(w io.Writer) {
	f, _, err := readContexts()
	if err != nil {
		return
	}
	for n := range f.Contexts {
		fmt.Fprintln(w, n)
	}
}

// addContext writes the context of the flags given under NAME.
func addContext(c *cli.Context) error {
	name := c.Args().First()
	if c.NArg() != 1 || name == "" || strings.ContainsAny(name, " \t\n/") {
		return usageError{fmt.Errorf("context add: want one NAME argument without spaces or slashes")}
	}
	ctx := map[string]string{}
	for _, k := range contextKeys {
		v := c.String(k.name)
		if v == "" {
			continue
		}
		if slices.Contains(fileKeys, k.name) {
			abs, err := filepath.Abs(v)
			if err != nil {
				return err
			}
			if k.name != "data" {
				if _, err := os.Stat(abs); err != nil {
					return usageError{fmt.Errorf("context add: --%s %s: %w", k.name, v, err)}
				}
			}
			v = abs
		}
		ctx[k.name] = v
	}
	if len(ctx) == 0 {
		return usageError{fmt.Errorf("context add %s: give at least one setting (--nats URL, --data DIR, …; see --help)", name)}
	}
	f, path, err := readContexts()
	if err != nil {
		return err
	}
	f.Contexts[name] = ctx
	if c.Bool("select") || f.Current == "" {
		f.Current = name
	}
	if err := writeContexts(f, path); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "context %s saved in %s", name, path)
	if f.Current == name {
		fmt.Fprint(c.App.ErrWriter, "; selected")
	}
	fmt.Fprintln(c.App.ErrWriter)
	return nil
}

// selectContext makes NAME the context commands use, or none.
func selectContext(c *cli.Context) error {
	f, path, err := readContexts()
	if err != nil {
		return err
	}
	switch {
	case c.Bool("none") && c.NArg() == 0:
		f.Current = ""
	case c.NArg() == 1 && !c.Bool("none"):
		name := c.Args().First()
		if _, ok := f.Contexts[name]; !ok {
			return fmt.Errorf("no context %q in %s (wstream context ls)", name, path)
		}
		f.Current = name
	default:
		return usageError{errors.New("context select: want one NAME, or --none")}
	}
	return writeContexts(f, path)
}
