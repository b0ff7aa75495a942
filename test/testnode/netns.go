package testnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// The addresses of a node's network namespace. None of them exists outside
// it: the namespace is the test's own, and nothing in it routes anywhere
// else (it has no interface to the host).
const (
	// nodeIP is the kubelet's node address, on the namespace's loopback.
	nodeIP = "10.200.0.1"
	// podSubnet is the pods' bridge network; podGateway the bridge's own
	// address, the pods' default route.
	podSubnet  = "10.244.0.0/24"
	podGateway = "10.244.0.1"
)

// ip runs iproute2's ip with args.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, out)
	}
	return nil
}

// createNetns makes the named network namespace with its loopback up and
// the node's and the kubernetes Service's addresses on it.
func createNetns(ctx context.Context, name, serviceIP string) error {
	if err := ip(ctx, "netns", "add", name); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", name, "addr", "add", nodeIP + "/32", "dev", "lo"},
		{"-n", name, "addr", "add", serviceIP + "/32", "dev", "lo"},
	} {
		if err := ip(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// netnsPath is where ip netns keeps a namespace.
func netnsPath(name string) string { return "/run/netns/" + name }

// inNetns runs fn on an OS thread that has entered the network namespace
// at path: a socket fn creates belongs to that namespace for its whole
// life, whichever thread later uses it.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is handed back to the runtime only once it is in the
		// host's namespace again; otherwise it ends with this goroutine.
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer host.Close()
		target, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		err = fn()
		if unix.Setns(int(host.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// listenIn listens on addr inside the network namespace at path.
func listenIn(path, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(path, func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		return err
	})
	return ln, err
}

// dialIn dials addr from inside the network namespace at path.
func dialIn(ctx context.Context, path, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(path, func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
