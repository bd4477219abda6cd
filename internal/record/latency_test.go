package record

import (
	"testing"
	"time"

	"github.com/handoffhq/handoff/client"
)

func commitAt(ms int, member, task string, epoch, checkpoint uint64) Event {
	e := ev(ms, member, client.EventCommit, task, epoch)
	e.Checkpoint = checkpoint
	return e
}

func input(ms int, task string, seq uint64) Input {
	return Input{Task: task, Seq: seq, Published: t0.Add(time.Duration(ms) * time.Millisecond)}
}

func TestLatencies(t *testing.T) {
	events := []Event{
		commitAt(20, "a", "t", 1, 2),
		commitAt(15, "a", "u", 1, 3),
		commitAt(40, "b", "t", 2, 5),
		commitAt(30, "a", "t", 1, 4), // acknowledged before the commit at 40 that also reaches 4
	}
	inputs := []Input{input(0, "t", 1), input(10, "t", 2), input(12, "t", 4), input(14, "t", 5), input(16, "t", 6), input(1, "u", 3)}
	got := Latencies(inputs, events)
	want := []time.Duration{20 * time.Millisecond, 10 * time.Millisecond, 18 * time.Millisecond, 26 * time.Millisecond, 14 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("Latencies = %+v, want %d (seq 6 of t was never acknowledged)", got, len(want))
	}
	for i, l := range got {
		if l.Latency != want[i] {
			t.Errorf("latency of %s seq %d = %s, want %s", l.Task, l.Seq, l.Latency, want[i])
		}
	}
}

func TestSpikes(t *testing.T) {
	// t moves from a to b: a stops at 1000, b starts at 1030 and first
	// commits at 1050. u is never moved.
	events := []Event{
		ev(0, "a", client.EventStart, "t", 1),
		ev(1000, "a", client.EventStop, "t", 1),
		ev(1001, "a", client.EventRelease, "t", 1),
		ev(1030, "b", client.EventStart, "t", 2),
	}
	var inputs []Input
	seq := uint64(0)
	// Steady: a message every 100 ms, acknowledged 5 ms later, before the
	// move and after it; around it: one published at 990 (not read before
	// the stop) and one at 1010 (during the pause), both acknowledged by
	// b's first commit at 1050.
	for ms := 100; ms <= 2000; ms += 100 {
		if ms == 1000 {
			continue
		}
		seq++
		inputs = append(inputs, input(ms, "t", seq))
		if ms < 1000 {
			events = append(events, commitAt(ms+5, "a", "t", 1, seq))
		} else {
			events = append(events, commitAt(ms+5, "b", "t", 2, seq))
		}
		if ms == 900 {
			seq++
			inputs = append(inputs, input(990, "t", seq))
			seq++
			inputs = append(inputs, input(1010, "t", seq))
			events = append(events, commitAt(1050, "b", "t", 2, seq))
		}
	}
	lats := Latencies(inputs, events)
	pauses := Pauses(events, t0.Add(3*time.Second))
	spikes := Spikes(pauses, lats, events, t0)
	if len(spikes) != 1 {
		t.Fatalf("Spikes = %+v, want one", spikes)
	}
	sp := spikes[0]
	// Around the move: 990 (60 ms) and 1010 (40 ms); 1100 is after b's
	// first commit. Steady: every other message, 5 ms each.
	if sp.Messages != 2 || sp.Worst != 60*time.Millisecond || sp.Steady != 5*time.Millisecond || sp.Excess != 55*time.Millisecond ||
		sp.SteadyMessages != 19 || !sp.FirstCommit.Equal(t0.Add(1050*time.Millisecond)) {
		t.Errorf("spike = %d messages, worst %s, steady %s over %d, excess %s, first commit %s; want 2, 60ms, 5ms over 19, 55ms, at 1050ms",
			sp.Messages, sp.Worst, sp.Steady, sp.SteadyMessages, sp.Excess, sp.FirstCommit.Sub(t0))
	}

	// A task with no steady message of its own is measured against every
	// task's: u's steady messages take 7 ms.
	var withU []Latency
	for _, l := range lats {
		if !l.Published.Before(t0.Add(950*time.Millisecond)) && !l.Published.After(t0.Add(1060*time.Millisecond)) {
			withU = append(withU, l)
		}
	}
	for ms := 100; ms <= 300; ms += 100 {
		withU = append(withU, Latency{Input: input(ms, "u", uint64(ms)), Latency: 7 * time.Millisecond})
	}
	if got := Spikes(pauses, withU, events, t0); len(got) != 1 || got[0].Steady != 7*time.Millisecond || got[0].Excess != 53*time.Millisecond {
		t.Errorf("Spikes of a task without steady messages = %+v, want one over every task's steady 7ms", got)
	}

	// No message around the move: no spike.
	var sparse []Latency
	for _, l := range lats {
		if l.Published.Before(t0.Add(950*time.Millisecond)) || l.Published.After(t0.Add(1060*time.Millisecond)) {
			sparse = append(sparse, l)
		}
	}
	if got := Spikes(pauses, sparse, events, t0); len(got) != 0 {
		t.Errorf("Spikes without a message around the move = %+v, want none", got)
	}
}
