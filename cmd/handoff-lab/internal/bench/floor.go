package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/lab"
	"github.com/handoffhq/handoff/internal/proc"
)

// The floor of the state scenario is a bare net/http server on the same
// transports as the agent's API: a round trip to it moves the same bytes
// as a call of the API (the request's body, an answer of the size asked
// for in ?n=) and does nothing else. What a call of the API costs beyond
// it is the API's own. With --processes it runs as a process of its own,
// 'handoff-lab bench --serve-floor DIR', as the agent does.

// floorSocket is the floor's Unix socket in its directory.
const floorSocket = "floor.sock"

// floorBody is what the floor answers with (a prefix of it).
var floorBody = make([]byte, 16<<20)

// floorHandler reads the request's body and answers ?n= bytes.
func floorHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := 0
	if v, ok := strings.CutPrefix(r.URL.RawQuery, "n="); ok {
		n, _ = strconv.Atoi(v)
	}
	n = min(max(n, 0), len(floorBody))
	h := w.Header()
	h["Content-Type"] = []string{"application/octet-stream"}
	h["Content-Length"] = []string{strconv.Itoa(n)}
	_, _ = w.Write(floorBody[:n])
}

// floorServer serves the floor on 127.0.0.1 and on dir's socket until
// ctx ends.
type floorServer struct {
	tcp, unix string // the addresses, as the API's: host:port, unix:PATH
	srv       *http.Server
	served    chan error
}

func startFloor(dir string) (*floorServer, error) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	path := filepath.Join(dir, floorSocket)
	_ = os.Remove(path)
	unix, err := net.Listen("unix", path)
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("floor: %w", err)
	}
	f := &floorServer{tcp: tcp.Addr().String(), unix: api.UnixPrefix + path, served: make(chan error, 2),
		srv: &http.Server{Handler: http.HandlerFunc(floorHandler), ReadHeaderTimeout: 10 * time.Second}}
	for _, ln := range []net.Listener{tcp, unix} {
		go func() { f.served <- f.srv.Serve(ln) }()
	}
	return f, nil
}

func (f *floorServer) close() {
	_ = f.srv.Close()
	<-f.served
	<-f.served
}

// serveFloor is 'handoff-lab bench --serve-floor DIR': the floor as a process.
// It prints its addresses, one per line ("floor tcp ADDR", "floor unix
// unix:PATH"), and serves until ctx ends.
func serveFloor(ctx context.Context, dir string, stdout io.Writer) error {
	f, err := startFloor(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "floor tcp %s\nfloor unix %s\n", f.tcp, f.unix)
	<-ctx.Done()
	f.close()
	return nil
}

// floorProcess is the floor run as a process of the bench's own binary,
// handoff-lab.
type floorProcess struct {
	p         *proc.Process
	tcp, unix string
}

// startFloorProcess starts 'handoff-lab bench --serve-floor dir' and waits
// for it to print its addresses.
func startFloorProcess(ctx context.Context, procs *lab.Processes, dir string) (*floorProcess, error) {
	p := &proc.Process{Name: "floor", Path: procs.Binaries.Lab, Args: []string{"bench", "--serve-floor", dir},
		LogPath: filepath.Join(dir, "floor.log")}
	if err := p.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(p.LogPath)
		fp := &floorProcess{p: p}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "floor tcp "); ok {
				fp.tcp = v
			}
			if v, ok := strings.CutPrefix(line, "floor unix "); ok {
				fp.unix = v
			}
		}
		if fp.tcp != "" && fp.unix != "" {
			return fp, nil
		}
		select {
		case <-ctx.Done():
			_ = p.Kill()
			return nil, ctx.Err()
		case <-p.Exited():
			return nil, fmt.Errorf("the floor process exited: %v (see %s)", p.ExitErr(), p.LogPath)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			_ = p.Kill()
			return nil, errors.New("the floor process printed no addresses within 30s (see " + p.LogPath + ")")
		}
	}
}

func (f *floorProcess) close() {
	_ = f.p.Terminate()
	if f.p.Wait(5*time.Second) != nil {
		_ = f.p.Kill()
	}
}
