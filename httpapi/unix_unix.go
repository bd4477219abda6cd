//go:build unix

package httpapi

import (
	"net"
	"sync"
	"syscall"
)

// umaskMu serializes the socket's creation under a narrowed umask; the
// umask is the process's, so files other goroutines create meanwhile are
// at worst created with fewer permissions, never more.
var umaskMu sync.Mutex

// listenUnixPrivate binds path with the socket file's mode 0600 from the
// start: there is no moment at which another user could connect.
func listenUnixPrivate(path string) (net.Listener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}
