package invariants

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
	pauses, unpaired := Pauses(events)
	if len(pauses) != 3 || pauses[0].Duration() != 10*time.Millisecond || pauses[0].From != "a" || pauses[0].To != "b" ||
		pauses[1].Duration() != 50*time.Millisecond || pauses[1].To != "c" || pauses[2].Duration() != time.Millisecond || pauses[2].To != "a" {
		t.Errorf("Pauses = %+v, want a→b 10ms, b→c 50ms and c→a 1ms, each from the old owner's stop", pauses)
	}
	if len(unpaired) != 1 || unpaired[0].Task != "u" {
		t.Errorf("Pauses unpaired = %+v, want the release of u", unpaired)
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
