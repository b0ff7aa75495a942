package testwan

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gridsync/gridsync/test/testnetns"
)

// openTUN creates the TUN device name in the namespace at path and
// returns this process's end of it: what the namespace routes into the
// device is read here, and what is written here the namespace receives
// on it. The device is created in the namespace the file is opened in,
// so both happen inside it.
func openTUN(path, name string) (*os.File, error) {
	var f *os.File
	err := testnetns.Do(path, func() error {
		// Non-blocking: the file is then read through the runtime's
		// poller, and Close ends a Read in progress.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			_ = unix.Close(fd)
			return err
		}
		// Bare IP packets, no packet-information header.
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			_ = unix.Close(fd)
			return fmt.Errorf("create TUN device %s: %w", name, err)
		}
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	return f, err
}
