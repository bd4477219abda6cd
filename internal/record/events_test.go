package record

import (
	"testing"
	"time"

	"github.com/handoffhq/handoff/client"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func ev(ms int, member string, typ client.EventType, task string, epoch uint64) Event {
	return Event{Member: member, Time: t0.Add(time.Duration(ms) * time.Millisecond), Type: typ, Task: task, Epoch: epoch}
}

func TestPauses(t *testing.T) {
	events := []Event{
		ev(0, "a", client.EventStart, "t", 1),
		ev(100, "a", client.EventStop, "t", 1),
		ev(101, "a", client.EventRelease, "t", 1),
		ev(110, "b", client.EventStart, "t", 2),
		ev(200, "b", client.EventRestart, "t", 2),
		ev(300, "b", client.EventStart, "t", 2), // a restart: not the pause
		ev(400, "b", client.EventStop, "t", 2),
		ev(405, "b", client.EventRelease, "t", 2),
		ev(450, "c", client.EventStart, "t", 4), // epoch 3 was never started: 4 is next
		ev(500, "c", client.EventRelease, "u", 1),
		// A direct hand-off: the next owner starts before the release
		// call returns; the pause runs from the stop.
		ev(600, "c", client.EventStop, "t", 4),
		ev(601, "a", client.EventStart, "t", 5),
		ev(603, "c", client.EventRelease, "t", 4),
	}
	pauses := Pauses(events, t0.Add(time.Second))
	if len(pauses) != 4 {
		t.Fatalf("Pauses = %+v, want 4", pauses)
	}
	for i, want := range []struct {
		to       string
		d        time.Duration
		finished bool
	}{{"b", 10 * time.Millisecond, true}, {"c", 50 * time.Millisecond, true}, {"", 500 * time.Millisecond, false}, {"a", time.Millisecond, true}} {
		p := pauses[i]
		if p.To != want.to || p.Duration != want.d || p.Unfinished == want.finished {
			t.Errorf("pause %d = %s→%s %s (unfinished %v), want →%s %s, each from the old owner's stop", i, p.From, p.To, p.Duration, p.Unfinished, want.to, want.d)
		}
	}
	if pauses[2].Task != "u" || !pauses[2].Unfinished {
		t.Errorf("pause of u = %+v, want unfinished: no start followed its release", pauses[2])
	}
}

func TestPausesCalledOff(t *testing.T) {
	events := []Event{
		ev(0, "a", client.EventStart, "t", 1),
		ev(10, "a", client.EventStop, "t", 1),
		ev(11, "a", client.EventRelease, "t", 1),
		ev(30, "a", client.EventStart, "t", 1), // the move was called off
		ev(50, "b", client.EventStart, "t", 2),
	}
	pauses := Pauses(events, t0.Add(time.Second))
	if len(pauses) != 1 || pauses[0].To != "a" || pauses[0].Duration != 20*time.Millisecond || pauses[0].Moved() {
		t.Errorf("Pauses = %+v, want one pause of 20ms that ends on a, not a move", pauses)
	}
}

// An old owner cut off from the group hears of its revoke only after the
// leader gave the task away: the next owner started first.
func TestPausesOverlapped(t *testing.T) {
	events := []Event{
		ev(0, "a", client.EventStart, "s", 1),
		ev(40, "b", client.EventStart, "s", 2),
		ev(60, "a", client.EventStop, "s", 1),
		ev(61, "a", client.EventRelease, "s", 1),
	}
	pauses := Pauses(events, t0.Add(time.Second))
	if len(pauses) != 1 {
		t.Fatalf("Pauses = %+v, want 1", pauses)
	}
	p := pauses[0]
	if !p.Overlapped || p.Unfinished || p.To != "b" || p.Duration != 0 || !p.End.Equal(t0.Add(40*time.Millisecond)) || p.Moved() {
		t.Errorf("pause = %+v, want an overlap with b from 40ms, no pause and no move", p)
	}
	if o := Overlaps(events); len(o) != 1 {
		t.Errorf("Overlaps = %q, want the one overlap", o)
	}
}

func TestFailovers(t *testing.T) {
	events := []Event{
		ev(0, "a", client.EventStart, "t", 1),
		ev(0, "a", client.EventStart, "u", 1),
		ev(5, "a", client.EventStop, "u", 1),
		ev(40, "b", client.EventStart, "t", 2),
	}
	got := Failovers(events, "a", t0.Add(10*time.Millisecond), t0.Add(time.Second))
	if len(got) != 1 || got[0].Task != "t" || got[0].To != "b" || got[0].Duration != 30*time.Millisecond || got[0].Kind != PauseFailover {
		t.Errorf("Failovers = %+v, want t's 30ms failover to b (u had stopped)", got)
	}
}

func TestOverlaps(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		want   int
	}{
		{"hand-off", []Event{ev(0, "a", client.EventStart, "t", 1), ev(10, "a", client.EventStop, "t", 1), ev(11, "b", client.EventStart, "t", 2)}, 0},
		{"restart on one member", []Event{ev(0, "a", client.EventStart, "t", 1), ev(5, "a", client.EventStart, "t", 1), ev(10, "a", client.EventStop, "t", 1)}, 0},
		{"new owner before the stop", []Event{ev(0, "a", client.EventStart, "t", 1), ev(9, "b", client.EventStart, "t", 2), ev(10, "a", client.EventStop, "t", 1)}, 1},
		{"never stopped", []Event{ev(0, "a", client.EventStart, "t", 1), ev(20, "b", client.EventStart, "t", 2)}, 1},
		{"other tasks", []Event{ev(0, "a", client.EventStart, "t", 1), ev(1, "b", client.EventStart, "u", 1)}, 0},
		{"back on the same member", []Event{ev(0, "a", client.EventStart, "t", 1), ev(10, "a", client.EventStop, "t", 1),
			ev(11, "b", client.EventStart, "t", 2), ev(20, "b", client.EventStop, "t", 2), ev(21, "a", client.EventStart, "t", 3)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Overlaps(tt.events); len(got) != tt.want {
				t.Errorf("Overlaps = %v, want %d", got, tt.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {0, 1}} {
		if got := Percentile(ds, tt.p); got != tt.want {
			t.Errorf("Percentile(1..100, %v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
	if ds[0] != 100 {
		t.Errorf("Percentile sorted its input")
	}
}

func TestAcks(t *testing.T) {
	events := []Event{{Type: client.EventCommit, Task: "t", Seq: 3, Epoch: 1}, {Type: client.EventStart, Task: "t"}}
	if got := Acks(events); len(got) != 1 || got[0] != (Acked{Task: "t", Seq: 3, Epoch: 1}) {
		t.Errorf("Acks = %+v", got)
	}
}
