package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/project"
)

func initCommand() *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "start an operator project: a word count in LANG with its plan, the guest SDK and a README",
		ArgsUsage: "NAME",
		Description: `Writes a new project into NAME (or --dir): the operators (a word count: "split"
and "count" with keyed state), plan.json, wstream.json, a README that says how to build,
test and deploy, and a copy of the guest SDK, so the project builds offline. The
directory must be new or empty. Then:

   cd NAME && wstream build && wstream deploy build/NAME.wasm`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "lang", Aliases: []string{"l"}, Usage: "language of the operators: " + project.LanguageNames()},
			&cli.StringFlag{Name: "dir", Usage: "directory to write the project into (default: NAME)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("init: want one argument, the project's NAME")}
			}
			name := c.Args().First()
			if err := project.CheckName(name); err != nil {
				return usageError{err}
			}
			if !c.IsSet("lang") {
				return usageError{fmt.Errorf("init: --lang is required: one of %s", project.LanguageNames())}
			}
			lang, err := project.ParseLanguage(c.String("lang"))
			if err != nil {
				return usageError{fmt.Errorf("--lang: %w", err)}
			}
			dir := c.String("dir")
			if dir == "" {
				dir = name
			}
			files, err := project.Init(project.InitOptions{Dir: dir, Name: name, Lang: lang, Version: version})
			if err != nil {
				return err
			}
			w := c.App.Writer
			if asJSON, _ := jsonOutput(c); asJSON {
				return writeJSON(w, struct {
					Name     string   `json:"name"`
					Language string   `json:"language"`
					Dir      string   `json:"dir"`
					Files    []string `json:"files"`
				}{name, string(lang), dir, orEmpty(files)})
			}
			fmt.Fprintf(w, "created %s project %s in %s:\n", lang, name, dir)
			var sdk int
			for _, f := range files {
				if strings.HasPrefix(f, "sdk/") {
					sdk++
					continue
				}
				fmt.Fprintf(w, "  %s\n", f)
			}
			if sdk > 0 {
				fmt.Fprintf(w, "  sdk/ (the guest SDK, %d files)\n", sdk)
			}
			fmt.Fprintln(w, "next:")
			if dir != "." {
				fmt.Fprintf(w, "  cd %s\n", dir)
			}
			if lang == project.AssemblyScript {
				fmt.Fprintln(w, "  npm install        # once: the AssemblyScript compiler")
			}
			fmt.Fprintln(w, "  wstream build")
			fmt.Fprintf(w, "  wstream deploy %s\n", filepath.ToSlash(filepath.Join("build", name+".wasm")))
			return nil
		},
	}
}
