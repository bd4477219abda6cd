package scenario

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// RSS returns the resident set size of process pid in bytes, from the
// VmRSS line of /proc/<pid>/status (Linux).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read the status of pid %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest) // "12345 kB"
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("pid %d: unexpected VmRSS line %q", pid, sc.Text())
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: VmRSS %q: %w", pid, f[0], err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("pid %d: no VmRSS in its status (a zombie?)", pid)
}

// RSSRun is what an RSS tracker saw of one run (one pid) of an agent.
type RSSRun struct {
	Member           string
	Pid              int
	First, Last, Max int64 // bytes
	FirstAt, LastAt  time.Time
	samples          int
}

// rssTracker samples the RSS of every tracked member's agent, run by run,
// from its own goroutine until stop.
type rssTracker struct {
	mu      sync.Mutex
	members []*Member
	runs    []*RSSRun
	byPid   map[int]*RSSRun

	stopc    chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// trackRSS starts sampling the agents of members every interval.
func trackRSS(interval time.Duration, members ...*Member) *rssTracker {
	r := &rssTracker{members: members, byPid: map[int]*RSSRun{}, stopc: make(chan struct{}), done: make(chan struct{})}
	r.sample()
	go func() {
		defer close(r.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stopc:
				return
			case <-t.C:
				r.sample()
			}
		}
	}()
	return r
}

// add tracks another member's agent.
func (r *rssTracker) add(m *Member) {
	r.mu.Lock()
	r.members = append(r.members, m)
	r.mu.Unlock()
}

// sample reads the RSS of every tracked agent that runs.
func (r *rssTracker) sample() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, m := range r.members {
		pid := m.Agent.Pid()
		if pid == 0 || !m.Agent.Running() {
			continue
		}
		rss, err := RSS(pid)
		if err != nil {
			continue // it exited since Running
		}
		run := r.byPid[pid]
		if run == nil {
			run = &RSSRun{Member: m.ID, Pid: pid, First: rss, FirstAt: now}
			r.byPid[pid] = run
			r.runs = append(r.runs, run)
		}
		run.Last, run.LastAt, run.Max = rss, now, max(run.Max, rss)
		run.samples++
	}
}

// stop stops the sampling, takes a last sample the first time, and returns
// every run seen, in the order first seen. Safe to call twice.
func (r *rssTracker) stop() []RSSRun {
	r.stopOnce.Do(func() {
		close(r.stopc)
		<-r.done
		r.sample()
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RSSRun, len(r.runs))
	for i, run := range r.runs {
		out[i] = *run
	}
	return out
}

// mb formats bytes as megabytes.
func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
