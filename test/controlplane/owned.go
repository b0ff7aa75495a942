package controlplane

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

const ownerFile = "owner.pid"

// OwnedTempDir makes a new temporary folder named prefix* that records this
// test binary as its owner, for RemoveAbandoned.
func OwnedTempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return "", fmt.Errorf("write the folder's owner: %w", err)
	}
	return dir, nil
}

// RemoveAbandoned calls remove for each folder OwnedTempDir made with
// prefix whose test binary died without tearing down, so that crashed runs
// do not fill the temporary folder (or, for a node, leave its processes,
// mounts and namespaces behind).
func RemoveAbandoned(prefix string, remove func(dir string)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(data))
		if err != nil || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		remove(dir)
	}
}

// WaitUntil polls ready every 50 ms until it holds, the process exits or
// timeout passes.
func (p *Process) WaitUntil(ctx context.Context, timeout time.Duration, ready func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// FreePorts reserves n distinct loopback ports by listening on port 0 and
// releasing them just before the servers bind them.
func FreePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
