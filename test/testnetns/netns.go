// Package testnetns is network namespaces for tests: made and removed
// with iproute2, and entered by one OS thread at a time, so that a socket
// created there belongs to the namespace for its whole life whichever
// thread later uses it. Everything runs as root.
package testnetns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Path is where ip netns keeps the namespace name.
func Path(name string) string { return "/run/netns/" + name }

// IP runs iproute2's ip with args.
func IP(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, out)
	}
	return nil
}

// Add makes the named namespace with its loopback up.
func Add(ctx context.Context, name string) error {
	if err := IP(ctx, "netns", "add", name); err != nil {
		return err
	}
	return IP(ctx, "-n", name, "link", "set", "lo", "up")
}

// Delete removes the named namespace; the interfaces in it go with it.
func Delete(ctx context.Context, name string) error {
	return IP(ctx, "netns", "delete", name)
}

// Do runs fn on an OS thread that has entered the network namespace at
// path. fn's own goroutine stays on that thread until fn returns; the
// goroutines fn starts run in the process's namespace.
func Do(path string, fn func() error) error {
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

// Listen listens for TCP on addr inside the namespace at path.
func Listen(path, addr string) (net.Listener, error) {
	var ln net.Listener
	err := Do(path, func() (err error) {
		ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		return err
	})
	return ln, err
}

// ListenPacket listens for UDP on addr inside the namespace at path.
func ListenPacket(path, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := Do(path, func() (err error) {
		pc, err = (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", addr)
		return err
	})
	return pc, err
}

// Dial dials addr from inside the namespace at path.
func Dial(ctx context.Context, path, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := Do(path, func() (err error) {
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
