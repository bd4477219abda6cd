package scenario

import (
	"testing"
	"time"
)

func TestCatchUps(t *testing.T) {
	t0 := time.Now()
	l := &progressLog{}
	add := func(d time.Duration, member, task string, replayed, end, lag uint64) {
		r := progressReport{heard: t0.Add(d)}
		r.Member, r.Task, r.Replayed, r.End, r.Lag = member, task, replayed, end, lag
		l.reports = append(l.reports, r)
	}
	add(-time.Second, "m1", "t-0", 500, 500, 0) // before the restart
	add(time.Millisecond, "m1", "t-0", 10, 600, 30)
	add(2*time.Millisecond, "m1", "t-0", 40, 630, 0) // caught up: the catch-up
	add(3*time.Millisecond, "m1", "t-0", 60, 650, 0) // tailing afterwards
	add(4*time.Millisecond, "m1", "t-1", 5, 100, 3)  // never caught up
	add(5*time.Millisecond, "m2", "t-0", 1, 1, 0)
	got := l.catchUps("m1", t0)
	if c := got["t-0"]; c.Replayed != 40 || c.End != 630 || !c.CaughtUp {
		t.Errorf("catch-up of t-0 = %+v, want 40 replayed up to 630", c)
	}
	if c := got["t-1"]; c.Replayed != 5 || c.CaughtUp {
		t.Errorf("catch-up of t-1 = %+v, want its last report, not caught up", c)
	}
	if len(got) != 2 {
		t.Errorf("catchUps = %+v, want t-0 and t-1 of m1", got)
	}
}
