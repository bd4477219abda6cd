//go:build !unix

package httpapi

import (
	"errors"
	"net"
)

func listenUnixPrivate(string) (net.Listener, error) {
	return nil, errors.New("the API listens on a Unix socket only on Unix systems")
}
