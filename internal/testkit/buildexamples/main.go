// Command buildexamples builds the examples of every guest language with the
// same builders the tests use (internal/testkit/testmod) and copies each module to
// OUT/LANG/NAME.wasm:
//
//	go run ./internal/testkit/buildexamples [-o examples/wasm/build] [-lang go,c,...] [NAME...]
//
// NAME defaults to wordcount, window and conformance. A missing toolchain is
// an error that says to run scripts/setup.sh.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

func main() {
	out := flag.String("o", filepath.Join("examples", "wasm", "build"), "output directory")
	langs := flag.String("lang", strings.Join(testmod.Languages, ","), "comma-separated guest languages")
	flag.Parse()
	names := flag.Args()
	if len(names) == 0 {
		names = []string{"wordcount", "window", "conformance"}
	}
	failed := false
	for _, lang := range strings.Split(*langs, ",") {
		for _, name := range names {
			dst := filepath.Join(*out, lang, name+".wasm")
			if err := build(lang, name, dst); err != nil {
				fmt.Fprintf(os.Stderr, "buildexamples: %s %s: %v\n", lang, name, err)
				failed = true
				continue
			}
			fmt.Println(dst)
		}
	}
	if failed {
		os.Exit(1)
	}
}

func build(lang, name, dst string) error {
	src, err := testmod.Build(lang, name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
