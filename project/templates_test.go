package project

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTemplatesAreTheExamples: a project's operators are the wordcount
// example of its language (examples/wasm/LANG/wordcount) without the plan
// built into it, from the first line of code on; only the header comment
// differs. The examples are what the language-wide tests check (identical
// output, conformance of the runtime, portable state), so a fix to an
// example must reach the template too: this test fails until it does.
func TestTemplatesAreTheExamples(t *testing.T) {
	type edit struct{ re, with string }
	for _, c := range []struct {
		lang    Language
		example string
		start   string
		edits   []edit
	}{
		{Go, "go/wordcount/main.go", "package main", []edit{
			{"\nconst plan = `[^`]*`\n", "\n"},
			{"\twstream.SetPlan\\(plan\\)\n", ""},
		}},
		{C, "c/wordcount/main.c", `#include "wstream.h"`, []edit{
			{`\nWSTREAM_PLAN\((?s:.*?)\);\n`, "\n"},
		}},
		{Rust, "rust/wordcount/main.rs", "use wstream::", []edit{
			{`\nconst PLAN: &str = r#"(?s:.*?)"#;\n`, "\n"},
			{"    plan: PLAN,\n", ""},
		}},
		{AssemblyScript, "as/wordcount/index.ts", "import {", []edit{
			{`"\.\./\.\./\.\./\.\./guest-sdk/assemblyscript/assembly/`, `"../sdk/assemblyscript/`},
			{`\n// The job plan(?s:.*?)setPlan\(PLAN\);\n`, "\n"},
			{`, register, setPlan }`, ", register }"},
		}},
		{WAT, "wat/wordcount.wat", "(module", []edit{
			{`  ;; The job plan, byte for byte(?s:.*?)\\00"\)\n`, ""},
			{`  ;; wstream_plan returns(?s:.*?)\(i32\.const 0x3400\)\)\)\)\)\n\n`, ""},
		}},
	} {
		t.Run(string(c.lang), func(t *testing.T) {
			ex, err := os.ReadFile(filepath.Join("..", "examples", "wasm", filepath.FromSlash(c.example)))
			if err != nil {
				t.Fatal(err)
			}
			want := from(t, string(ex), c.start)
			for _, e := range c.edits {
				re := regexp.MustCompile(e.re)
				if !re.MatchString(want) {
					t.Fatalf("the example no longer has %s: update this test and the template", e.re)
				}
				want = re.ReplaceAllLiteralString(want, e.with)
			}
			files, err := render(InitOptions{Name: "wc", Lang: c.lang})
			if err != nil {
				t.Fatal(err)
			}
			got := from(t, string(files[sourceFile[c.lang]]), c.start)
			if squeeze(got) != squeeze(want) {
				g, w := strings.Split(squeeze(got), "\n"), strings.Split(squeeze(want), "\n")
				for i := 0; i < len(g) && i < len(w); i++ {
					if g[i] != w[i] {
						t.Fatalf("%s differs from %s (less its plan) at line %d of the code:\n template: %s\n example:  %s", sourceFile[c.lang], c.example, i+1, g[i], w[i])
					}
				}
				t.Fatalf("%s has %d lines of code, %s (less its plan) %d", sourceFile[c.lang], len(g), c.example, len(w))
			}
		})
	}
}

// from returns s from the first occurrence of start.
func from(t *testing.T, s, start string) string {
	t.Helper()
	i := strings.Index(s, start)
	if i < 0 {
		t.Fatalf("no %q in the source", start)
	}
	return s[i:]
}

// squeeze folds runs of blank lines into one.
func squeeze(s string) string {
	return regexp.MustCompile(`\n{3,}`).ReplaceAllString(s, "\n\n")
}
