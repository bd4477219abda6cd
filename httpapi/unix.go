package httpapi

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/handoffhq/handoff/api"
)

// socketAddr is the address of the API's socket; it prints as the listen
// address it came from, unix:PATH.
type socketAddr struct{ *net.UnixAddr }

func (a socketAddr) String() string { return api.UnixPrefix + a.Name }

// listenUnix binds the Unix socket at path. The socket is born with mode
// 0600 (only this user may connect) and, with a group, then given to that
// group with mode 0660. A socket file left by an agent that is gone is
// replaced; one another process still serves on, or a path that is not a
// socket, is an error. Closing the listener removes the file.
func listenUnix(path, group string) (net.Listener, net.Addr, error) {
	if err := api.CheckSocketPath(path); err != nil {
		return nil, nil, err
	}
	gid := -1
	if group != "" {
		var err error
		if gid, err = lookupGroup(group); err != nil {
			return nil, nil, err
		}
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, nil, err
	}
	ln, err := listenUnixPrivate(path)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s%s: %w", api.UnixPrefix, path, err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			_ = ln.Close()
			return nil, nil, fmt.Errorf("give socket %s to group %s: %w (the agent's user must be a member of the group)", path, group, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			_ = ln.Close()
			return nil, nil, fmt.Errorf("make socket %s mode 0660: %w", path, err)
		}
	}
	return ln, socketAddr{ln.Addr().(*net.UnixAddr)}, nil
}

// lookupGroup returns the ID of a group given by name or number.
func lookupGroup(group string) (int, error) {
	if id, err := strconv.Atoi(group); err == nil && id >= 0 {
		return id, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: %w; give a group name or a numeric ID", group, err)
	}
	id, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("socket group %q has ID %q, not a number", group, g.Gid)
	}
	return id, nil
}

// removeStaleSocket removes a socket file at path that nobody accepts
// connections on any more (its agent was killed).
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket path %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket path %s exists and is not a socket; remove it or choose another path", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("socket %s is in use: another process (an agent of this data dir?) serves on it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("socket %s exists and could not be checked (%v); remove it if no agent runs", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the stale socket %s: %w", path, err)
	}
	return nil
}
