package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// The image cannot be built here (no Docker daemon, no registry), so these
// tests hold the Dockerfile to what it can be checked against: the
// Makefile's build, go.mod, the files the build reads, and the binary's
// flags.

// dockerfile returns the Dockerfile's instructions, continuation lines
// joined and comments dropped, as (instruction, arguments) pairs.
func dockerfile(t *testing.T) [][2]string {
	t.Helper()
	f, err := os.Open(filepath.Join(testmod.Root(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][2]string
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" && cur == "" {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		cur += l
		ins, args, _ := strings.Cut(cur, " ")
		out = append(out, [2]string{strings.ToUpper(ins), strings.TrimSpace(args)})
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// goBuildArgs returns the arguments of a go build command line after
// "build", without the -o flag and its value, and the -o value.
func goBuildArgs(line string) (args []string, out string) {
	f := strings.Fields(line)
	i := slices.Index(f, "build")
	if i < 0 {
		return nil, ""
	}
	f = f[i+1:]
	for j := 0; j < len(f); j++ {
		if f[j] == "-o" && j+1 < len(f) {
			out = f[j+1]
			j++
			continue
		}
		args = append(args, f[j])
	}
	return args, out
}

// TestDockerfileBuildsLikeMake: the image's binary is built by the same go
// build as `make build` (flags and package), the binary it copies is the
// one that build writes, and the Go image is recent enough for go.mod.
func TestDockerfileBuildsLikeMake(t *testing.T) {
	root := testmod.Root()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^build:.*\n\t(\$\(GO\) build .*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no `build:` target running $(GO) build in the Makefile")
	}
	makeArgs, _ := goBuildArgs(string(m[1]))

	ins := dockerfile(t)
	var builds []string
	var goImage, entry, volume string
	copies := map[string]string{} // source in the build stage → destination
	env := map[string]string{}
	for _, in := range ins {
		switch in[0] {
		case "FROM":
			if strings.HasPrefix(in[1], "golang:") {
				goImage = strings.Fields(in[1])[0]
			}
		case "RUN":
			if strings.HasPrefix(in[1], "go build ") {
				builds = append(builds, in[1])
			}
		case "COPY":
			f := strings.Fields(in[1])
			if len(f) >= 3 && slices.Contains(f, "--from=build") {
				copies[f[len(f)-2]] = f[len(f)-1]
			}
		case "ENV":
			k, v, _ := strings.Cut(in[1], "=")
			env[k] = v
		case "ENTRYPOINT":
			entry = in[1]
		case "VOLUME":
			volume = in[1]
		}
	}
	if len(builds) != 1 {
		t.Fatalf("want one RUN go build in the Dockerfile, have %q", builds)
	}
	dockerArgs, out := goBuildArgs(builds[0])
	if !slices.Equal(dockerArgs, makeArgs) {
		t.Errorf("the Dockerfile builds with go build %q, the Makefile with %q", dockerArgs, makeArgs)
	}
	bin, ok := copies[out]
	if !ok {
		t.Errorf("the build writes %s, the runtime stage copies %v", out, copies)
	}
	if entry != `["`+bin+`"]` {
		t.Errorf("ENTRYPOINT %s, want the binary built, [%q]", entry, bin)
	}

	// The Go image's version: at least go.mod's go directive.
	gm, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindSubmatch(gm)
	have := regexp.MustCompile(`^golang:(\d+)\.(\d+)`).FindStringSubmatch(goImage)
	if want == nil || have == nil {
		t.Fatalf("go.mod's go directive %q, Dockerfile's Go image %q", want, goImage)
	}
	wMaj, _ := strconv.Atoi(string(want[1]))
	wMin, _ := strconv.Atoi(string(want[2]))
	hMaj, _ := strconv.Atoi(have[1])
	hMin, _ := strconv.Atoi(have[2])
	if hMaj < wMaj || hMaj == wMaj && hMin < wMin {
		t.Errorf("the Dockerfile builds with %s, go.mod asks for go %s.%s", goImage, want[1], want[2])
	}

	// The data directory: the volume is where WSTREAM_DATA points, and
	// WSTREAM_DATA is what --data reads; the port exposed is the one
	// `wstream server` listens on.
	r := runCLI(t, root, "server", "--help")
	if !strings.Contains(r.stdout, "[$WSTREAM_DATA]") {
		t.Errorf("wstream server --help does not name $WSTREAM_DATA:\n%s", r.stdout)
	}
	if env["WSTREAM_DATA"] == "" || !strings.Contains(volume, env["WSTREAM_DATA"]) {
		t.Errorf("VOLUME %s, WSTREAM_DATA=%s", volume, env["WSTREAM_DATA"])
	}
	port := regexp.MustCompile(`--listen value .*\(default: "[^"]*:(\d+)"\)`).FindStringSubmatch(r.stdout)
	exposed := false
	for _, in := range ins {
		if in[0] == "EXPOSE" && port != nil && slices.Contains(strings.Fields(in[1]), port[1]) {
			exposed = true
		}
	}
	if !exposed {
		t.Errorf("the Dockerfile does not expose the port wstream server listens on (%v)", port)
	}
}

// TestDockerignoreKeepsBuildInputs: no file that go build ./cmd/wstream
// reads from the module (Go files, embedded files, go.mod and go.sum) is
// left out of the build context by .dockerignore.
func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	root := testmod.Root()
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf(".dockerignore: exceptions (%s) are not checked by this test", l)
			}
			patterns = append(patterns, strings.Trim(l, "/"))
		}
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps",
		"-f", `{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}`, "./cmd/wstream")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := []string{"go.mod", "go.sum"}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 50 {
		t.Fatalf("go list found only %d files", len(files))
	}
	for _, f := range files {
		// Docker matches a pattern against the path and each of its
		// parent directories, from the context's root.
		for p := f; p != "."; p = filepath.ToSlash(filepath.Dir(p)) {
			for _, pat := range patterns {
				if ok, _ := filepath.Match(pat, p); ok {
					t.Errorf("%s is a build input, and .dockerignore leaves it out (%s)", f, pat)
				}
			}
		}
	}
}
