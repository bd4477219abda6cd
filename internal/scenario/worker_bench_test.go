package scenario

import (
	"slices"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/record"
)

// BenchmarkWorkerLoss measures, with a 10 s worker timeout, the time from
// a worker's death (kill -9; its agent keeps running) to the first commit
// acknowledged to the new owner of each of its stateful tasks. It reports
// the earliest and the latest over the tasks, and the latest minus the
// worker timeout (the target is at most 100 ms).
//
//	go test ./internal/scenario -run XXX -bench WorkerLoss -benchtime 1x
func BenchmarkWorkerLoss(b *testing.B) {
	for range b.N {
		o := DefaultOptions()
		o.WorkerTimeout = 10 * time.Second
		o.ReleaseTimeout = 2 * time.Minute
		h := New(b, o)
		h.Start(3)
		gv := h.mustGroup()
		victim, owned := h.victimOf(gv, "m1", "m2", "m3")
		before := Epochs(gv)
		stateful, _ := Owned(gv, victim.ID)

		killed := time.Now()
		if err := victim.KillWorker(); err != nil {
			b.Fatal(err)
		}
		h.WaitMovedAway(time.Minute, victim.ID, owned, before)
		h.WaitCommitting(60*time.Second, 1)
		first := h.FirstCommits(victim.ID, stateful, before)
		var ds []time.Duration
		for _, task := range stateful {
			ds = append(ds, first[task].Sub(killed))
		}
		slices.Sort(ds)
		b.ReportMetric(ds[0].Seconds(), "s-earliest")
		b.ReportMetric(ds[len(ds)-1].Seconds(), "s-latest")
		b.ReportMetric(float64((ds[len(ds)-1] - o.WorkerTimeout).Milliseconds()), "ms-latest-over-timeout")
		h.Logf("kill -9 of %s's worker → first commit on the new owner: %v (worker timeout %s)", victim.ID, ds, o.WorkerTimeout)
		h.Verify(Expect{})
	}
}

// BenchmarkScaleUpLateWorker compares the hand-off pauses of a scale-up
// from 3 to 4 members when the new member's worker starts with its agent
// (prompt) and when it starts 3 s later (late), each on a group of its
// own. It reports each one's p50 and max, and logs the ratio of the late
// max to the prompt max (the target is at most 2).
//
//	go test ./internal/scenario -run XXX -bench ScaleUpLateWorker -benchtime 1x -v
func BenchmarkScaleUpLateWorker(b *testing.B) {
	maxes := map[string]time.Duration{}
	for _, start := range []struct {
		name  string
		delay time.Duration
	}{{"prompt", 0}, {"late", 3 * time.Second}} {
		b.Run(start.name, func(b *testing.B) {
			for range b.N {
				h := New(b, DefaultOptions())
				h.Start(3)
				mark := h.Mark()
				m4 := h.AddAgent("m4")
				if start.delay > 0 {
					startUp := time.NewTimer(start.delay) // the worker's start-up, as a JVM's
					<-startUp.C
				}
				h.StartWorker(m4)
				h.WaitSettled(90*time.Second, "m1", "m2", "m3", "m4")
				h.WaitCommitting(60*time.Second, 1)
				rep := h.Verify(Expect{Planned: true, Mark: mark})
				var ds []time.Duration
				for _, p := range pausesTo(rep.Pauses, "m4") {
					ds = append(ds, p.Duration)
				}
				if len(ds) == 0 {
					b.Fatal("no hand-off to m4 was recorded")
				}
				maxes[start.name] = record.Percentile(ds, 100)
				b.ReportMetric(record.Percentile(ds, 50).Seconds()*1e3, "ms-p50")
				b.ReportMetric(maxes[start.name].Seconds()*1e3, "ms-max")
			}
		})
	}
	if maxes["prompt"] > 0 {
		b.Logf("late/prompt max pause: %.2f (late %s, prompt %s)", maxes["late"].Seconds()/maxes["prompt"].Seconds(), maxes["late"], maxes["prompt"])
	}
}
