package api

import (
	"errors"
	"fmt"
	"strings"
)

// UnixPrefix starts a listen address that names a Unix domain socket:
// "unix:/run/handoff/api.sock". The worker reaches the API through the
// socket file, the way containers of a pod share a volume: nothing on the
// network can connect, and the file's mode says who on the host may.
const UnixPrefix = "unix:"

// maxSocketPath is the longest path a Unix socket may have on Linux (its
// sun_path holds 108 bytes with the final NUL).
const maxSocketPath = 107

// SocketPath returns the socket path of a listen address that names a Unix
// domain socket, and whether it does.
func SocketPath(addr string) (string, bool) { return strings.CutPrefix(addr, UnixPrefix) }

// CheckSocketPath says what is wrong with path as the API's socket, or nil.
func CheckSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("the socket path is empty: use unix:/path/to/api.sock")
	case len(path) > maxSocketPath:
		return fmt.Errorf("the socket path is %d bytes; a Unix socket path is at most %d: use a shorter one", len(path), maxSocketPath)
	}
	return nil
}
