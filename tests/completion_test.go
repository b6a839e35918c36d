package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
COMP_WORDS=(wstream tenant cr); COMP_CWORD=2; _wstream_complete; echo "3:${COMPREPLY[*]}"`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	for _, want := range []string{"1:deploy\n", "2:--checkpoint-interval\n", "3:creds\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("completion: no %q in\n%s", want, out)
		}
	}
	if r := runCLI(t, t.TempDir(), "completion", "fish"); r.code != 2 {
		t.Errorf("completion fish: exit %d\n%s", r.code, r.stderr)
	}
}
