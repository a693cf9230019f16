// Package testutil starts the local services that storage, engine and
// checkpoint tests (and `sfstate bench`) run against: a versitygw S3 server
// on 127.0.0.1 and a Toxiproxy server for fault injection.
//
// Two layers:
//   - Launch* functions start a process and return it with an error; they
//     do not depend on package testing, so commands such as
//     `sfstate bench storage` can use them. The caller must Close.
//   - Start* functions take a TB (a *testing.T or *testing.B), register
//     cleanup, and skip the test when the binaries are missing — or fail
//     it when CI=true. `make setup` builds the binaries into bin/.
//
// Binaries are found in $SFSTATE_BIN, else in bin/ at the repository root
// (the directory holding go.mod, found by walking up from the working
// directory).
package testutil

import (
	"errors"
	"fmt"
	"github.com/sfstate/sfstate/internal/fixtures"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// TB is the part of testing.TB the Start* helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// ErrNoBinary is returned when a service binary cannot be found.
var ErrNoBinary = errors.New("service binary not found (run `make setup` to build bin/versitygw and bin/toxiproxy-server)")

// RepoRoot returns the directory holding go.mod, walking up from the
// working directory.
func RepoRoot() (string, error) {
	dir, err := fixtures.Root()
	if err != nil {
		return "", fmt.Errorf("no go.mod above the working directory: %w", err)
	}
	return dir, nil
}

// FindBinary locates a service binary by name in $SFSTATE_BIN or the
// repository's bin/ directory. The error wraps ErrNoBinary.
func FindBinary(name string) (string, error) {
	var dirs []string
	if d := os.Getenv("SFSTATE_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	if root, err := RepoRoot(); err == nil {
		dirs = append(dirs, filepath.Join(root, "bin"))
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe)) // next to an installed sfstate
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w; looked in %s", name, ErrNoBinary, strings.Join(dirs, ", "))
}

// requireBinary returns the binary's path or stops the test: Fatal when
// CI=true, Skip otherwise.
func requireBinary(t TB, name string) string {
	t.Helper()
	p, err := FindBinary(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (required when CI=true)", err)
		}
		t.Skipf("%v", err)
	}
	return p
}

// freePort returns a currently unused TCP address on 127.0.0.1.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// process is a started service with its log.
type process struct {
	cmd     *exec.Cmd
	log     *os.File
	logPath string
	done    chan struct{}
	waitErr error
	once    sync.Once
}

func startProcess(logPath string, bin string, args []string, env []string) (*process, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	bindToParent(cmd)
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, log: lf, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the end of the process log for error messages.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// stop kills the process and waits (bounded) for it to exit.
func (p *process) stop() {
	p.once.Do(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
			}
		}
		p.log.Close()
	})
}

// waitReady polls ready every 50ms until it returns nil, the process exits
// or timeout passes.
func (p *process) waitReady(name string, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited early (%v): %s", name, p.waitErr, p.logTail())
		}
		if last = ready(); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v: %v; log: %s", name, timeout, last, p.logTail())
}
