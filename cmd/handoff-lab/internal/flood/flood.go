// Package flood is 'handoff-lab flood': a local program that floods an
// agent's API with slow request bodies, as a misbehaving or hostile
// neighbour would, from a process of its own. Each of its connections
// sends a request's headers with a large Content-Length and then one byte
// of the body at a time, a byte every --every, and starts again on a new
// connection as soon as the agent answers (a 408 once the agent's body
// timeout passes) or closes it. It prints its counters as a JSON line every
// --report, and a last one when it stops, so that the bench can tell when
// the flood is up and what the agent did to it. Nothing here is for
// production.
package flood

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoffhq/handoff/api"
)

// Env is what the flood may touch of the outside world: its counters go to
// Stdout.
type Env struct {
	Stdout io.Writer
}

// Settings are the flood's flags.
type Settings struct {
	Target        string
	Conns         int
	Path          string
	ContentLength int
	Every         time.Duration
	Report        time.Duration
	Token         string
}

// Counts are the flood's counters, as each JSON line prints them: totals
// since the start, and Open and Arriving now.
type Counts struct {
	Time time.Time `json:"t"`
	// Open is the connections open now; Arriving those whose headers are
	// sent and whose body trickles in.
	Open     int64 `json:"open"`
	Arriving int64 `json:"arriving"`
	// Connects counts the connections made, DialErrors the attempts that
	// failed.
	Connects   int64 `json:"connects"`
	DialErrors int64 `json:"dialErrors"`
	// TimedOut counts the answers 408, Refused the answers 503, Answered
	// every answer; Closed counts the connections the agent closed (or
	// reset) without an answer.
	Answered int64 `json:"answered"`
	TimedOut int64 `json:"timedOut"`
	Refused  int64 `json:"refused"`
	Closed   int64 `json:"closed"`
	// BytesSent counts the body bytes sent.
	BytesSent int64 `json:"bytesSent"`
	Done      bool  `json:"done,omitempty"`
}

// counters are Counts, updated by every connection at once.
type counters struct {
	open, arriving, connects, dialErrors, answered, timedOut, refused, closed, bytesSent atomic.Int64
}

func (c *counters) snapshot(done bool) Counts {
	return Counts{Time: time.Now().UTC(), Open: c.open.Load(), Arriving: c.arriving.Load(), Connects: c.connects.Load(),
		DialErrors: c.dialErrors.Load(), Answered: c.answered.Load(), TimedOut: c.timedOut.Load(), Refused: c.refused.Load(),
		Closed: c.closed.Load(), BytesSent: c.bytesSent.Load(), Done: done}
}

func flags(s *Settings, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.Target, "target", "", "the agent's API `address`: host:port, or unix:PATH for its socket")
	fs.IntVar(&s.Conns, "conns", 300, "connections that each send a slow body, at once")
	fs.StringVar(&s.Path, "path", "/tasks/p-0/commit", "the `path` each slow body is POSTed to")
	fs.IntVar(&s.ContentLength, "content-length", 1_000_000, "the Content-Length each request declares, in `bytes`")
	fs.DurationVar(&s.Every, "every", time.Second, "send one byte of the body this `often`")
	fs.DurationVar(&s.Report, "report", time.Second, "print the counters as a JSON line this `often`")
	fs.StringVar(&s.Token, "token", "", "send 'Authorization: Bearer TOKEN' (the agent's --api-token), as a flood that has it")
	fs.Usage = func() {
		fmt.Fprint(out, `Usage: handoff-lab flood --target ADDRESS [flags]

Floods an agent's API with slow request bodies until it is stopped (SIGINT
or SIGTERM): --conns connections each POST a request whose body declares
--content-length bytes and send one byte of it every --every; each starts
again on a new connection as soon as the agent answers it (a 408 once the
agent's --api-body-timeout passes) or closes it. Prints its counters as a
JSON line every --report and when it stops. A tool to check the agent's
admission from outside ('handoff-lab bench --scenario flood' runs it); do
not point it at an agent you do not own.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func parse(args []string, out io.Writer) (Settings, error) {
	var s Settings
	fs := flags(&s, out)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	switch {
	case fs.NArg() > 0:
		return s, fmt.Errorf("unexpected argument %q; flood takes only flags", fs.Arg(0))
	case s.Target == "":
		return s, errors.New("--target: name the agent's API address (host:port or unix:PATH)")
	case s.Conns < 1:
		return s, fmt.Errorf("--conns %d: use at least 1", s.Conns)
	case s.ContentLength < 2:
		return s, fmt.Errorf("--content-length %d: use at least 2, so that the body can trickle", s.ContentLength)
	case s.Every <= 0 || s.Report <= 0:
		return s, errors.New("--every and --report must be positive")
	}
	return s, nil
}

// Run is 'handoff-lab flood args...': it floods until ctx ends, then
// prints its last counters. It returns flag.ErrHelp after --help.
func Run(ctx context.Context, args []string, e Env) error {
	s, err := parse(args, e.Stdout)
	if err != nil {
		return err
	}
	var (
		c   counters
		wg  sync.WaitGroup
		enc = json.NewEncoder(e.Stdout)
	)
	head := request(s)
	for range s.Conns {
		wg.Go(func() { loop(ctx, s, head, &c) })
	}
	ticker := time.NewTicker(s.Report)
	defer ticker.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-ticker.C:
			if err := enc.Encode(c.snapshot(false)); err != nil {
				return fmt.Errorf("print counters: %w", err)
			}
		}
	}
	wg.Wait()
	if err := enc.Encode(c.snapshot(true)); err != nil {
		return fmt.Errorf("print counters: %w", err)
	}
	return nil
}

// request is the head of each slow request, with the first byte of its body.
func request(s Settings) []byte {
	auth := ""
	if s.Token != "" {
		auth = "Authorization: Bearer " + s.Token + "\r\n"
	}
	return []byte("POST " + s.Path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + auth +
		"Content-Length: " + strconv.Itoa(s.ContentLength) + "\r\n\r\n{")
}

// loop sends slow bodies one after the other, each on a new connection,
// until ctx ends.
func loop(ctx context.Context, s Settings, head []byte, c *counters) {
	for ctx.Err() == nil {
		conn, err := dial(ctx, s.Target)
		if err != nil {
			if ctx.Err() == nil {
				c.dialErrors.Add(1)
				// The agent's queue is full or it is gone: do not spin.
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
			continue
		}
		c.connects.Add(1)
		c.open.Add(1)
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		exchange(ctx, s, conn, head, c)
		stop()
		conn.Close()
		c.open.Add(-1)
	}
}

// exchange sends one slow body on conn and waits for the agent's answer,
// sending a byte of the body every s.Every meanwhile, and counts how it
// ended.
func exchange(ctx context.Context, s Settings, conn net.Conn, head []byte, c *counters) {
	if _, err := conn.Write(head); err != nil {
		c.closed.Add(1)
		return
	}
	c.arriving.Add(1)
	defer c.arriving.Add(-1)
	c.bytesSent.Add(1)
	sent := 1
	br := bufio.NewReader(conn)
	for {
		// Wait for the answer's first byte until the next byte is due.
		_ = conn.SetReadDeadline(time.Now().Add(s.Every))
		_, err := br.Peek(1)
		if err == nil {
			break
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			if ctx.Err() == nil {
				c.closed.Add(1)
			}
			return
		}
		if sent >= s.ContentLength-1 { // never finish the body
			continue
		}
		if _, err := conn.Write([]byte{' '}); err != nil {
			if ctx.Err() == nil {
				c.closed.Add(1)
			}
			return
		}
		sent++
		c.bytesSent.Add(1)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.closed.Add(1)
		return
	}
	resp.Body.Close()
	c.answered.Add(1)
	switch resp.StatusCode {
	case http.StatusRequestTimeout:
		c.timedOut.Add(1)
	case http.StatusServiceUnavailable:
		c.refused.Add(1)
	}
}

// dial connects to addr, host:port or unix:PATH.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	network := "tcp"
	if path, ok := api.SocketPath(addr); ok {
		network, addr = "unix", path
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	return d.DialContext(ctx, network, addr)
}
