package scenario

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// progressLog records every learner and standby progress report the group
// publishes, with when the harness heard it. Safe for concurrent use.
type progressLog struct {
	mu      sync.Mutex
	reports []progressReport
	stop    func()
}

type progressReport struct {
	heard time.Time
	api.LearnerProgress
}

func watchProgress(nc *nats.Conn, groupName string) (*progressLog, error) {
	l := &progressLog{}
	stop, err := group.WatchProgress(nc, groupName, func(p group.Progress) {
		l.mu.Lock()
		l.reports = append(l.reports, progressReport{heard: time.Now(), LearnerProgress: p.LearnerProgress})
		l.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	l.stop = stop
	return l, nil
}

// CatchUp is how much one member replayed to catch a task up, from one
// restore's reports.
type CatchUp struct {
	Member, Task string
	// Replayed is what the restore had applied when it first reported no
	// lag (or at its last report, if it never did): the catch-up, without
	// the tailing of new commits that followed.
	Replayed uint64
	// End is the changelog sequence it had caught up to.
	End uint64
	// CaughtUp says it reported no lag.
	CaughtUp bool
}

// catchUps returns, for each task member reported on since from, its
// first restore's catch-up.
func (l *progressLog) catchUps(member string, from time.Time) map[string]CatchUp {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]CatchUp{}
	for _, r := range l.reports {
		if r.Member != member || r.heard.Before(from) {
			continue
		}
		c, seen := out[r.Task]
		if c.CaughtUp {
			continue
		}
		if seen && r.Replayed < c.Replayed {
			continue // a later restore of the same task: keep the first
		}
		out[r.Task] = CatchUp{Member: member, Task: r.Task, Replayed: r.Replayed, End: r.End, CaughtUp: r.Lag == 0}
	}
	return out
}
