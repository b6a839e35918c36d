package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// bashCompletion asks wstream itself for the words that may follow: urfave/cli
// answers --generate-bash-completion with the commands, subcommands or
// flags of the command line so far. Arguments that are files (modules,
// plans, directories) fall back to the shell's file completion.
const bashCompletion = `# wstream completion for bash; zsh reads it after bashcompinit.
_wstream_complete() {
	local cur="${COMP_WORDS[COMP_CWORD]}" words
	if [[ "$cur" == -* ]]; then
		words=$("${COMP_WORDS[@]:0:COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
	else
		words=$("${COMP_WORDS[@]:0:COMP_CWORD}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o bashdefault -o default -F _wstream_complete wstream
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script",
		ArgsUsage: "bash|zsh",
		Description: `Prints a script that completes wstream's commands and flags. Load it with
  source <(wstream completion bash)
or, in zsh,
  autoload -U +X bashcompinit && bashcompinit && source <(wstream completion zsh)`,
		Action: func(c *cli.Context) error {
			switch sh := c.Args().First(); sh {
			case "bash", "zsh":
				fmt.Fprint(c.App.Writer, bashCompletion)
				return nil
			default:
				return usageError{fmt.Errorf("completion: want bash or zsh, got %q", sh)}
			}
		},
	}
}
