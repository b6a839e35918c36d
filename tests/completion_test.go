package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShellCompletion loads `wstream completion bash` into a real bash and
// completes a command and a flag with it.
func TestShellCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("bash: %v", err)
	}
	bin := wstreamBin(t)
	if filepath.Base(bin) != "wstream" {
		t.Fatalf("the binary is %s: completion is registered for the name wstream", bin)
	}
	script := `source <(wstream completion bash)
COMP_WORDS=(wstream dep); COMP_CWORD=1; _wstream_complete; echo "1:${COMPREPLY[*]}"
COMP_WORDS=(wstream deploy --checkpoint-i); COMP_CWORD=2; _wstream_complete; echo "2:${COMPREPLY[*]}"
COMP_WORDS=(wstream tenant cr); COMP_CWORD=2; _wstream_complete; echo "3:${COMPREPLY[*]}"
COMP_WORDS=(wstream deploy --checkpoint-mode al); COMP_CWORD=3; _wstream_complete; echo "4:${COMPREPLY[*]}"
COMP_WORDS=(wstream list -o ""); COMP_CWORD=3; _wstream_complete; echo "5:${COMPREPLY[*]}"
COMP_WORDS=(wstream --context ""); COMP_CWORD=2; _wstream_complete; echo "6:${COMPREPLY[*]}"
COMP_WORDS=(wstream completion ""); COMP_CWORD=2; _wstream_complete; echo "7:${COMPREPLY[*]}"`
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"WSTREAM_CONFIG="+filepath.Join(dir, "contexts.json"))
	if r := runWith(t, dir, []string{"WSTREAM_CONFIG=" + filepath.Join(dir, "contexts.json")}, time.Minute, "context", "add", "prod", "--nats", "nats://127.0.0.1:4222"); r.code != 0 {
		t.Fatalf("context add: exit %d\n%s", r.code, r.stderr)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	for _, want := range []string{"1:deploy\n", "2:--checkpoint-interval\n", "3:creds\n", "4:aligned\n", "5:table json\n", "6:prod\n", "7:bash zsh fish\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("completion: no %q in\n%s", want, out)
		}
	}
	// zsh runs the bash script; fish has its own, over the same answers.
	r := runCLI(t, dir, "completion", "zsh")
	if r.code != 0 || !strings.Contains(r.stdout, "bashcompinit") || !strings.Contains(r.stdout, "complete -o bashdefault -o default -F _wstream_complete wstream") {
		t.Errorf("completion zsh: exit %d\n%s", r.code, r.stdout)
	}
	r = runCLI(t, dir, "completion", "fish")
	if r.code != 0 || !strings.Contains(r.stdout, "complete -c wstream -a '(__wstream_complete)'") ||
		!strings.Contains(r.stdout, "wstream __values $prev") || !strings.Contains(r.stdout, "--generate-bash-completion") {
		t.Errorf("completion fish: exit %d\n%s", r.code, r.stdout)
	}
	if r := runCLI(t, dir, "completion", "tcsh"); r.code != 2 {
		t.Errorf("completion tcsh: exit %d\n%s", r.code, r.stderr)
	}
	// What the fish script asks: the values of a flag, none for a boolean.
	if r := runCLI(t, dir, "__values", "--restart"); r.code != 0 || r.stdout != "none\nfixed-delay\nexponential-backoff\n" {
		t.Errorf("__values --restart: exit %d, %q", r.code, r.stdout)
	}
	if r := runCLI(t, dir, "__values", "--quiet"); r.code != 1 {
		t.Errorf("__values --quiet (a boolean): exit %d, want 1", r.code)
	}
}

// completeJobIDs completes `wstream stop ` in bash against srv and returns
// the words offered.
func completeJobIDs(t *testing.T, dir string, srv *testServer) string {
	t.Helper()
	bin := wstreamBin(t)
	script := `source <(wstream completion bash)
COMP_WORDS=(wstream stop --nats ` + srv.url + ` --data ` + srv.data + ` ""); COMP_CWORD=6; _wstream_complete; echo "${COMPREPLY[*]}"`
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "WSTREAM_CONFIG="+filepath.Join(dir, "none.json"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}
