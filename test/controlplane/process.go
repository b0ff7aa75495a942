package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Process is one server child process with its output in a log file.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
}

// spawner starts every child from one goroutine locked to its OS thread.
// Linux delivers the parent-death signal when the thread that forked the
// child exits, not the process; a thread the Go runtime retired would kill
// a healthy server in the middle of a test. This thread lives as long as
// the test binary.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		for req := range spawnRequests {
			req.done <- req.cmd.Start()
		}
	}()
}

func startProcess(name, logPath, binary string, args ...string) (*Process, error) {
	// No context: a server lives until stop, not for the length of a call.
	return StartProcess(name, logPath, exec.Command(binary, args...)) //nolint:noctx // see above
}

// StartProcess starts cmd (its environment and folder as the caller set
// them) as a server: its output appended to logPath, in a process group of
// its own, killed by the kernel when the test binary dies.
func StartProcess(name, logPath string, cmd *exec.Cmd) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group, so that stop reaches anything the server forks.
		Setpgid: true,
		// Killed by the kernel if the test binary dies without cleaning up
		// (panic in a test goroutine, -timeout, SIGKILL).
		Pdeathsig: syscall.SIGKILL,
	}
	done := make(chan error)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	if err := <-done; err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Running tells whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop asks the process group to terminate and kills it after grace.
func (p *Process) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	pgid := -p.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("terminate %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.exited
	return nil
}

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// LogTail returns the end of the process's output, for error messages.
func (p *Process) LogTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no %s log: %v)", p.name, err)
	}
	const keep = 4000
	if len(data) > keep {
		data = data[len(data)-keep:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return string(data)
}
