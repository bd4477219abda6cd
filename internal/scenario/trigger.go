package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/changelog"
)

// Trigger fires a fault the moment the group is handing a task over,
// however briefly that lasts: it judges every generation record the leader
// publishes, with the member assignments it names, as the watch of the
// group's KV bucket delivers them, from its own goroutine, while the test
// goes on (say, starting the member whose arrival causes the move). It
// never re-reads the group: a hand-off can be over (a leave takes a few
// tens of milliseconds) before a read of the whole group would be. It
// fires on the generation record, not on the assignment written before
// it, so that the members have been told of the hand-off when the fault
// comes.
type Trigger struct {
	what   string
	done   chan struct{}
	cancel context.CancelFunc

	inFlight string // what was moving when it fired; "" until then
}

// OnMoving starts watching the group and calls fire, from the trigger's
// goroutine, with a description of the hand-offs in flight the first time
// a published generation has a task with a learner or a pending revoke;
// then it stops. fire must be safe to call from another goroutine
// (Process's methods are). The watch is in place when OnMoving returns.
func (h *Harness) OnMoving(what string, fire func(inFlight string)) *Trigger {
	return h.onGeneration(what, InFlight, fire)
}

// OnRevoke is OnMoving for the first task a published generation revokes,
// with a direct revoke, from an owner to a target that pick accepts;
// fire gets the task, its owner and the revoke's target.
func (h *Harness) OnRevoke(what string, pick func(owner, target string) bool, fire func(task, owner, target string)) *Trigger {
	var task, owner, target string
	judge := func(ma group.MemberAssignment) string {
		for _, id := range slices.Sorted(maps.Keys(ma.Tasks)) {
			if rv := ma.Tasks[id].Revoke; rv != nil && rv.Epoch > 0 && pick(ma.Member, rv.Target) {
				task, owner, target = id, ma.Member, rv.Target
				return fmt.Sprintf("%s revoking %s→%s at epoch %d", id, ma.Member, rv.Target, rv.Epoch)
			}
		}
		return ""
	}
	return h.onGeneration(what, judge, func(string) { fire(task, owner, target) })
}

// onGeneration is OnMoving with judge saying what of a member's assignment
// fires the trigger ("" for nothing).
func (h *Harness) onGeneration(what string, judge func(group.MemberAssignment) string, fire func(inFlight string)) *Trigger {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := h.group.Bucket(ctx)
	if err != nil {
		cancel()
		h.t.Fatalf("trigger on %s: %v", what, err)
	}
	w, err := kv.WatchFiltered(ctx, []string{group.KeyGeneration, group.KeyIndex, group.PrefixAssignment + ">"}, jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		h.t.Fatalf("trigger on %s: watch the group's generations: %v", what, err)
	}
	tr := &Trigger{what: what, done: make(chan struct{}), cancel: cancel}
	h.t.Cleanup(tr.Stop)
	// The watcher stops when ctx is cancelled (Wait, Stop), off this
	// goroutine: a stop asks the server, which may be the one just killed,
	// and must not hold the test up.
	go func() {
		defer close(tr.done)
		type written struct {
			rev uint64
			ma  group.MemberAssignment
		}
		assignments := map[string]written{} // by member, as last written
		var index group.GenerationRecord    // the last full record of a compact generation
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				if e.Key() == group.KeyIndex {
					_ = json.Unmarshal(e.Value(), &index)
					continue
				}
				if e.Key() != group.KeyGeneration {
					var ma group.MemberAssignment
					if json.Unmarshal(e.Value(), &ma) == nil { // an undecodable one is the agents' to log
						assignments[ma.Member] = written{e.Revision(), ma}
					}
					continue
				}
				var g group.GenerationRecord
				if json.Unmarshal(e.Value(), &g) != nil {
					continue
				}
				if g.Compact {
					if index.Generation != g.Generation {
						continue
					}
					g = index
				}
				var parts []string
				for _, member := range slices.Sorted(maps.Keys(g.Assignments)) {
					if a, ok := assignments[member]; ok && a.rev == g.Assignments[member] {
						if moving := judge(a.ma); moving != "" {
							parts = append(parts, moving)
						}
					}
				}
				if len(parts) > 0 {
					moving := fmt.Sprintf("generation %d: %s", g.Generation, strings.Join(parts, ", "))
					fire(moving)
					tr.inFlight = moving
					return
				}
			}
		}
	}()
	return tr
}

// OnReleaseEntry starts watching the group's changelog and calls fire, from
// the trigger's goroutine, with the task, successor and epoch of each
// release entry appended after it started, until fire reports that it
// acted; then it stops. The watch is in place when OnReleaseEntry returns.
func (h *Harness) OnReleaseEntry(what string, fire func(task, successor string, epoch uint64) bool) *Trigger {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) {
		cancel()
		h.t.Fatalf("trigger on %s: watch the changelog: %v", what, err)
	}
	stream, err := h.js.Stream(ctx, changelog.StreamName(h.opts.Group))
	if err != nil {
		fail(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		fail(err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		fail(err)
	}
	tr := &Trigger{what: what, done: make(chan struct{}), cancel: cancel}
	h.t.Cleanup(tr.Stop)
	go func() {
		<-ctx.Done()
		msgs.Stop() // ends Next below
	}()
	go func() {
		defer close(tr.done)
		defer cancel()
		for {
			m, err := msgs.Next()
			if err != nil {
				return
			}
			e, err := changelog.Decode(m.Data())
			if err != nil || e.Kind != changelog.KindRelease {
				continue
			}
			task := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
			if !fire(task, e.Successor, e.Epoch) {
				continue
			}
			tr.inFlight = fmt.Sprintf("release entry of %s to %s at epoch %d", task, e.Successor, e.Epoch)
			return
		}
	}()
	return tr
}

// Wait waits until the trigger has fired and returns what was in flight
// when it did; it fails the test if it has not fired within timeout.
func (tr *Trigger) Wait(h *Harness, timeout time.Duration) string {
	h.t.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-tr.done:
	case <-t.C:
		tr.cancel()
		<-tr.done
	}
	tr.cancel()
	if tr.inFlight == "" {
		h.t.Fatalf("timed out after %s waiting for %s: no assignment had a task moving", timeout, tr.what)
	}
	h.Logf("%s: fired on %s", tr.what, tr.inFlight)
	return tr.inFlight
}

// Stop cancels the trigger if it has not fired; safe to call twice.
func (tr *Trigger) Stop() {
	tr.cancel()
	<-tr.done
}
