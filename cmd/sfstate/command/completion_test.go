package command

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCompletionBash sources the bash script and asks it for completions
// the way bash does (COMP_WORDS / COMP_CWORD).
func TestCompletionBash(t *testing.T) {
	script, e, code := run(t, "completion", "bash")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, e)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	f := filepath.Join(t.TempDir(), "c.bash")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		var q []string
		for _, w := range words {
			q = append(q, "'"+w+"'")
		}
		prog := "source " + f + "; COMP_WORDS=(" + strings.Join(q, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(words)-1) + `; _sfstate; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	has := func(got []string, want string) bool {
		for _, g := range got {
			if g == want {
				return true
			}
		}
		return false
	}
	if got := complete("sfstate", "insp"); len(got) != 1 || got[0] != "inspect" {
		t.Errorf("sfstate insp<TAB> = %v", got)
	}
	if got := complete("sfstate", "rescale", "SP", "--par"); !has(got, "--parallelism") {
		t.Errorf("rescale --par<TAB> = %v", got)
	}
	if got := complete("sfstate", "inspect", "--js"); !has(got, "--json") {
		t.Errorf("inspect --js<TAB> (a global flag) = %v", got)
	}
	if got := complete("sfstate", "keygroups", ""); !has(got, "assign") || !has(got, "plan") {
		t.Errorf("keygroups <TAB> = %v", got)
	}
	if got := complete("sfstate", "keygroups", "assign", "--key"); !has(got, "--key-type") {
		t.Errorf("keygroups assign --key<TAB> = %v", got)
	}
}

func TestCompletionShells(t *testing.T) {
	for shell, want := range map[string]string{
		"zsh":  "bashcompinit",
		"fish": "complete -c sfstate -n '__fish_use_subcommand' -a inspect",
	} {
		o, e, code := run(t, "completion", shell)
		if code != ExitOK || !strings.Contains(o, want) {
			t.Errorf("completion %s: exit %d %s\n%s", shell, code, e, o)
		}
	}
	o, _, _ := run(t, "completion", "fish")
	if !strings.Contains(o, "__fish_seen_subcommand_from keygroups; and __fish_seen_subcommand_from assign' -l key-type") {
		t.Errorf("fish script lacks keygroups assign --key-type")
	}
	if _, _, code := run(t, "completion", "tcsh"); code != ExitUsage {
		t.Errorf("completion tcsh: exit %d", code)
	}
}
