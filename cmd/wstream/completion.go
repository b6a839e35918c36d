package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/coordinator"
)

// The scripts ask wstream itself for the words that may follow: urfave/cli
// answers --generate-bash-completion with the commands, subcommands or
// flags of the command line so far, and the commands that take a JOB with
// the cluster's job ids (completeJobs); a flag's values come from
// `wstream __values FLAG`, which fails for a flag that takes none. Files
// (modules, plans, directories) fall back to the shell's file completion.
const bashCompletion = `# wstream completion for bash
_wstream_complete() {
	local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" words
	if [[ "$prev" == -* ]] && words=$(wstream __values "$prev" 2>/dev/null); then
		COMPREPLY=($(compgen -W "$words" -- "$cur"))
		return
	fi
	if [[ "$cur" == -* ]]; then
		words=$("${COMP_WORDS[@]:0:COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
	else
		words=$("${COMP_WORDS[@]:0:COMP_CWORD}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o bashdefault -o default -F _wstream_complete wstream
`

// zsh runs the bash script through its bash completion layer.
const zshCompletion = `# wstream completion for zsh
autoload -U +X compinit && compinit
autoload -U +X bashcompinit && bashcompinit
` + bashCompletion

const fishCompletion = `# wstream completion for fish
function __wstream_complete
	set -l words (commandline -opc)
	set -l cur (commandline -ct)
	set -l prev $words[-1]
	if string match -q -- '-*' $prev
		set -l vals (wstream __values $prev 2>/dev/null)
		if test $status -eq 0
			printf '%s\n' $vals
			return
		end
	end
	if string match -q -- '-*' $cur
		$words $cur --generate-bash-completion 2>/dev/null
	else
		$words --generate-bash-completion 2>/dev/null
	end
end
complete -c wstream -a '(__wstream_complete)'
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script",
		ArgsUsage: "bash|zsh|fish",
		Description: `Prints a script that completes wstream's commands, flags, flag values and the
job ids of the cluster a command reaches (--nats, --data or the context). Load it with
  source <(wstream completion bash)          # bash, in ~/.bashrc
  source <(wstream completion zsh)           # zsh, in ~/.zshrc
  wstream completion fish | source           # fish, in config.fish`,
		BashComplete: func(c *cli.Context) {
			fmt.Fprintln(c.App.Writer, "bash\nzsh\nfish")
		},
		Action: func(c *cli.Context) error {
			sh := c.Args().First()
			script, ok := map[string]string{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}[sh]
			if !ok {
				return usageError{fmt.Errorf("completion: want bash, zsh or fish, got %q", sh)}
			}
			if asJSON, _ := jsonOutput(c); asJSON {
				return writeJSON(c.App.Writer, struct {
					Shell  string `json:"shell"`
					Script string `json:"script"`
				}{sh, script})
			}
			_, err := io.WriteString(c.App.Writer, script)
			return err
		},
	}
}

// flagValues are the values of the flags that take one of a few words.
var flagValues = map[string][]string{
	"checkpoint-mode":  {"aligned", "unaligned", "at-least-once"},
	"restart":          {"none", "fixed-delay", "exponential-backoff"},
	"savepoint-format": {"canonical", "native"},
	"log-format":       {"text", "json"},
	"log-level":        {"debug", "info", "warn", "error"},
	"output":           {"table", "json"},
	"on-guest-error":   {"fail", "dead-letter"},
	"source":           {"gen:", "file:path=", "jetstream:"},
	"sink":             {"stdout", "discard", "file:path=", "jetstream:"},
	"max-dead-letters": {"unlimited"},
}

// valuesCommand prints the values flag FLAG may take (none known: files or
// free text), and fails when no command has FLAG or it takes no value.
func valuesCommand(app func() []*cli.Command) *cli.Command {
	return &cli.Command{
		Name:            "__values",
		Hidden:          true,
		SkipFlagParsing: true,
		HideHelp:        true,
		ArgsUsage:       "FLAG",
		Action: func(c *cli.Context) error {
			name := strings.TrimLeft(c.Args().First(), "-")
			f := findFlag(app(), name)
			if f == nil {
				return cli.Exit("", exitFailed)
			}
			if _, ok := f.(*cli.BoolFlag); ok {
				return cli.Exit("", exitFailed)
			}
			name = f.Names()[0]
			if name == "context" {
				completeContexts(c.App.Writer)
				return nil
			}
			for _, v := range flagValues[name] {
				fmt.Fprintln(c.App.Writer, v)
			}
			return nil
		},
	}
}

func findFlag(cmds []*cli.Command, name string) cli.Flag {
	if hasName(contextFlag, name) {
		return contextFlag
	}
	for _, cmd := range cmds {
		if f := findFlag(cmd.Subcommands, name); f != nil {
			return f
		}
		for _, f := range cmd.Flags {
			if hasName(f, name) {
				return f
			}
		}
	}
	return nil
}

// jobCommands take a JOB first: their completion offers the ids of the
// cluster's jobs.
var jobCommands = map[string]bool{"follow": true, "stop": true, "cancel": true, "savepoint": true, "upgrade": true}

// completeJobs makes the commands that take a JOB complete it with the ids
// of the jobs the command would reach, and flags as urfave/cli does.
func completeJobs(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if !jobCommands[cmd.Name] {
			continue
		}
		flags := cli.DefaultCompleteWithFlags(cmd)
		cmd.BashComplete = func(c *cli.Context) {
			if n := len(os.Args); n > 2 && strings.HasPrefix(os.Args[n-2], "-") {
				flags(c)
				return
			}
			if c.NArg() > 0 {
				return
			}
			printJobIDs(c, c.App.Writer)
		}
	}
}

// printJobIDs prints the ids of the jobs the command reaches, running ones
// first; nothing when it reaches none within a few seconds.
func printJobIDs(c *cli.Context, w io.Writer) {
	if applyContext(c) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.Context, 3*time.Second)
	defer cancel()
	parent := c.Context
	c.Context = ctx
	defer func() { c.Context = parent }()
	e, err := clientEngine(c)
	if err != nil {
		return
	}
	defer e.Close(context.Background())
	jobs, _, err := coordinator.ListJobs(ctx, e.Conn())
	if err != nil {
		return
	}
	for _, done := range []bool{false, true} {
		for _, j := range jobs {
			if ended(j.State) == done {
				fmt.Fprintln(w, j.JobID)
			}
		}
	}
}
