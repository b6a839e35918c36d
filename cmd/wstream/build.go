package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/project"
)

func buildCommand() *cli.Command {
	return &cli.Command{
		Name:      "build",
		Usage:     "build the operator project in DIR (default .) into its module",
		ArgsUsage: "[DIR]",
		Description: `Reads DIR/wstream.json (written by wstream init), checks the plan, compiles the
operators with the language's compiler (go, clang, rustc, asc or wat2wasm) and writes
the module, with the plan in it, to the project's output (build/NAME.wasm). A compiler
that is missing is named, with how to install it.`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print the commands build runs"}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usageError{errors.New("build: want at most one argument, the project's directory")}
			}
			dir := "."
			if c.NArg() == 1 {
				dir = c.Args().First()
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := project.BuildOptions{Stderr: c.App.ErrWriter}
			if verbose(c) {
				// -v shows every command the build runs.
				opts.Logf = func(format string, args ...any) { fmt.Fprintf(c.App.ErrWriter, format+"\n", args...) }
			}
			res, err := project.Build(ctx, dir, opts)
			if err != nil {
				return err
			}
			if asJSON, _ := jsonOutput(c); asJSON {
				return writeJSON(c.App.Writer, struct {
					Module   string `json:"module"`
					Language string `json:"language"`
					Size     int64  `json:"size"`
					Plan     bool   `json:"plan"`
				}{res.Module, string(res.Project.Language), res.Size, res.Plan})
			}
			plan := "with its plan"
			if !res.Plan {
				plan = "without a plan (deploy it with --plan FILE)"
			}
			fmt.Fprintf(c.App.Writer, "built %s (%s, %s) %s\n", res.Module, res.Project.Language, humanBytes(res.Size), plan)
			return nil
		},
	}
}
