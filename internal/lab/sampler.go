package lab

import (
	"context"
	"time"
)

// runSampler calls Sample every Options.SampleEvery until ctx ends.
func (l *Lab) runSampler(ctx context.Context) {
	t := time.NewTicker(l.opts.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.Sample(ctx)
		}
	}
}

// Sample takes one sample of every running member's view into the
// recorder. When a member has applied a generation newer than the group
// view the recorder holds, it first reads the group's assignment from NATS,
// so that an owner replaying before it serves is told apart from a
// learner. The sampler calls it on a ticker; tests may call it themselves.
func (l *Lab) Sample(ctx context.Context) {
	// Worker events first: a start logged after this read is judged by
	// the next sample, never dated before the views that follow.
	l.readProcessLogs()
	now, samples, gen := l.views()
	if gen > l.rec.groupGeneration() {
		l.readGroup(ctx)
		now, samples, _ = l.views() // as of after the read, which takes a while
	}
	l.rec.record(now, samples)
}

// views reads every member's view, all at once, and returns the highest
// generation. A member that has not answered within the sample budget is
// marked stale: the recorder keeps what it saw of it last, so that one slow
// agent does not hold up the sampling of the others.
func (l *Lab) views() (time.Time, []memberSample, uint64) {
	now := time.Now()
	ms := l.Members()
	answers := make([]<-chan viewResult, len(ms))
	for i, m := range ms {
		answers[i] = m.fetchView()
	}
	budget, cancel := context.WithTimeout(context.Background(), max(2*l.opts.SampleEvery, 50*time.Millisecond))
	defer cancel()
	samples := make([]memberSample, len(ms))
	var gen uint64
	for i, m := range ms {
		s := memberSample{id: m.ID}
		select {
		case r := <-answers[i]:
			s.running, s.view, s.leading = r.ok, r.view, r.leading
			s.stale = !r.ok && m.running()
		case <-budget.Done():
			s.stale = true
		}
		s.state = m.State()
		gen = max(gen, s.view.Generation)
		samples[i] = s
	}
	return now, samples, gen
}

// readGroup reads the group's assignment into the recorder.
func (l *Lab) readGroup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if gv, err := l.group.Read(ctx); err == nil { // an error: no member has created the group yet
		l.rec.setGroup(gv)
	}
}
