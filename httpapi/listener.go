package httpapi

import (
	"net"
	"sync"
)

// limitListener accepts at most max connections at once: Accept waits
// until a connection it returned closes. Connections beyond the limit wait
// in the kernel's accept queue (or are refused by the kernel once that is
// full), so a flood of idle or slow clients cannot exhaust the agent.
func limitListener(ln net.Listener, max int) net.Listener {
	return &limitedListener{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	slots     chan struct{} // one element per open connection
	done      chan struct{} // closed by Close, so that a waiting Accept returns
	closeOnce sync.Once
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its slot back when it closes.
type limitedConn struct {
	net.Conn
	release   func()
	closeOnce sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.release)
	return err
}
