package command

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/fixtures"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
	cliOut  []byte
)

// cliBinary returns the sfstate binary tests run as a user would: the one
// SFSTATE_CLI names, else one built once per test process.
func cliBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SFSTATE_CLI"); p != "" {
		return p
	}
	cliOnce.Do(func() {
		root, err := fixtures.Root()
		if err != nil {
			cliErr = err
			return
		}
		dir, err := os.MkdirTemp("", "sfstate-cli-test-*")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "sfstate")
		build := exec.Command("go", "build", "-o", cliPath, "./cmd/sfstate")
		build.Dir = root
		cliOut, cliErr = build.CombinedOutput()
	})
	if cliErr != nil {
		t.Fatalf("go build: %v\n%s", cliErr, cliOut)
	}
	return cliPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cliPath != "" {
		os.RemoveAll(filepath.Dir(cliPath))
	}
	os.Exit(code)
}

// TestInterruptExits130: a command blocked where it does not watch its
// context (reading keys from standard input) still ends with 130 on a
// second SIGINT.
func TestInterruptExits130(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cmd := exec.Command(cliBinary(t), "keygroups", "assign", "-")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for i := 0; i < 2; i++ {
		_ = cmd.Process.Signal(syscall.SIGINT)
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("still running 5s after two SIGINTs")
	}
	if code := cmd.ProcessState.ExitCode(); code != ExitInterrupted {
		t.Fatalf("exit %d, want %d", code, ExitInterrupted)
	}
}
