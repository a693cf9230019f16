//go:build linux

package testutil

import (
	"os/exec"
	"syscall"
)

// bindToParent makes the kernel kill the service when this process dies,
// so an interrupted test or benchmark leaves no server behind.
func bindToParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
