package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/poll"
)

// traffic is what a member's agent connection carried, as its own
// counters say.
type traffic struct{ msgsIn, msgsOut, bytesIn, bytesOut uint64 }

// since is what t carried beyond b: messages and bytes, both ways.
func (t traffic) since(b traffic) (msgs, bytes float64) {
	return float64(t.msgsIn - b.msgsIn + t.msgsOut - b.msgsOut), float64(t.bytesIn - b.bytesIn + t.bytesOut - b.bytesOut)
}

func (c *cluster) traffic(id string) traffic {
	st := c.members[id].local.NC.Stats()
	return traffic{st.InMsgs, st.OutMsgs, st.InBytes, st.OutBytes}
}

// memberCost is what a bystander's agent connection carried in a group of
// a size: idle, per heartbeat of its own, and per generation it was not
// part of (messages and bytes both ways). Each figure is the least over the
// bystanders: what grows with the group reaches every one of them, while
// rare traffic of a member's own (a look at the lease every few session
// timeouts) falls in some members' windows and not others', and would make
// a median jump between two runs of the same size.
type memberCost struct {
	idleMsgsPerBeat         float64
	idleBytesPerBeat        float64
	genMsgs, genBytes       float64
	generations, heartbeats int
}

// TestMemberTrafficFlat counts, at two group sizes with as many tasks per
// member, what a member's connection sends and receives idle (per
// heartbeat of its own) and per generation that does not concern it (three
// members join elsewhere): neither may grow with the group. It counts
// messages and bytes, and asserts no time.
func TestMemberTrafficFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs groups of 10 and 40 agents")
	}
	small, large := measureMemberCost(t, 10), measureMemberCost(t, 40)
	t.Logf("10 members: %+v", small)
	t.Logf("40 members: %+v", large)
	if large.idleMsgsPerBeat > small.idleMsgsPerBeat+1 {
		t.Errorf("idle: %.2f messages per heartbeat at 40 members, %.2f at 10: want no growth", large.idleMsgsPerBeat, small.idleMsgsPerBeat)
	}
	if large.genBytes > small.genBytes+100 || large.genMsgs > small.genMsgs+0.5 {
		t.Errorf("per generation: %.0f bytes in %.2f messages at 40 members, %.0f bytes in %.2f messages at 10: want no growth",
			large.genBytes, large.genMsgs, small.genBytes, small.genMsgs)
	}
}

// idleBeats is how many heartbeats of every member the idle window lasts.
const idleBeats = 12

func measureMemberCost(t *testing.T, n int) memberCost {
	var cost memberCost
	t.Run(fmt.Sprintf("members=%d", n), func(t *testing.T) {
		c := newCluster(t, testConfig(fmt.Sprintf("orders-0..%d", 2*n-1), ""))
		var ids []string
		for i := 1; i <= n; i++ {
			ids = append(ids, fmt.Sprintf("m%02d", i))
		}
		for _, id := range ids {
			c.start(id)
		}
		poll.Eventually(t, 2*time.Minute, "balanced", func() error { return balanced(c.view(), ids...) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The bystanders: neither the leader nor a candidate (which hears
		// the lease's renewals), nor a member whose tasks the join moves.
		g, _, err := group.ReadGeneration(ctx, c.kv)
		if err != nil {
			t.Fatal(err)
		}
		skip := map[string]bool{g.Leader: true}
		for _, id := range g.Candidates {
			skip[id] = true
		}
		owned := func() map[string]string {
			out := map[string]string{}
			for _, gt := range c.view().Tasks {
				out[gt.ID] = gt.Active
			}
			return out
		}
		ownedBefore := owned()
		w := watchRecords(ctx, t, c.kv)

		// Idle: every member's messages over what its heartbeats were,
		// once each member has beaten twelve times (rarer traffic, such as
		// a look at the lease every few session timeouts, then weighs
		// little on the figure), in a window with no
		// generation: a group just balanced may still publish some (the
		// leader records hand-offs), which are not idle traffic.
		before := map[string]traffic{}
		for try := 1; ; try++ {
			w.reset()
			for _, id := range ids {
				before[id] = c.traffic(id)
			}
			poll.Eventually(t, 2*time.Minute, "twelve heartbeats of every member", func() error {
				for _, id := range ids {
					if b := w.beats(id); b < idleBeats {
						return fmt.Errorf("%s beat %d times", id, b)
					}
				}
				return nil
			})
			if gens := w.generations(); gens == 0 {
				break
			} else if try == 10 {
				t.Fatalf("%d generations in each of 10 windows of %d heartbeats: the group never went idle", gens, idleBeats)
			}
		}
		var perBeat, bytesPerBeat []float64
		for _, id := range ids {
			if skip[id] {
				continue
			}
			m, by := c.traffic(id).since(before[id])
			beats := float64(w.beats(id))
			perBeat, bytesPerBeat = append(perBeat, m/beats), append(bytesPerBeat, by/beats)
			cost.heartbeats += w.beats(id)
		}
		cost.idleMsgsPerBeat, cost.idleBytesPerBeat = slices.Min(perBeat), slices.Min(bytesPerBeat)

		// A member joins: count what the others carry per generation,
		// less what their own heartbeats carried meanwhile.
		w.reset()
		for _, id := range ids {
			before[id] = c.traffic(id)
		}
		// Three join, one after the other: enough generations that a
		// heartbeat more or less in the window of one member is noise.
		all := slices.Clone(ids)
		for i := 1; i <= 3; i++ {
			joiner := fmt.Sprintf("m%02d", n+i)
			c.start(joiner)
			all = append(all, joiner)
			poll.Eventually(t, time.Minute, "balanced with "+joiner, func() error { return balanced(c.view(), all...) })
		}
		for task, owner := range owned() {
			if was := ownedBefore[task]; was != owner {
				skip[was] = true
			}
		}
		gens := w.generations()
		if gens == 0 {
			t.Fatal("no generation while a member joined")
		}
		var msgs, bytes []float64
		for _, id := range ids {
			if skip[id] {
				continue
			}
			m, by := c.traffic(id).since(before[id])
			beats := float64(w.beats(id))
			m -= beats * cost.idleMsgsPerBeat
			by -= beats * cost.idleBytesPerBeat
			msgs = append(msgs, max(0, m)/float64(gens))
			bytes = append(bytes, max(0, by)/float64(gens))
		}
		cost.genMsgs, cost.genBytes, cost.generations = slices.Min(msgs), slices.Min(bytes), gens
	})
	return cost
}

// recordWatch counts, from a watch of its own, each member's heartbeats
// (writes of its record) and the generations published.
type recordWatch struct {
	mu   sync.Mutex
	beat map[string]int
	gens int
}

func watchRecords(ctx context.Context, t *testing.T, kv jetstream.KeyValue) *recordWatch {
	t.Helper()
	kw, err := kv.WatchFiltered(ctx, []string{group.PrefixMember + ">", group.KeyGeneration}, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	w := &recordWatch{beat: map[string]int{}}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = kw.Stop()
		<-done
	})
	go func() {
		defer close(done)
		for e := range kw.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			w.mu.Lock()
			if e.Key() == group.KeyGeneration {
				var g group.GenerationRecord
				if json.Unmarshal(e.Value(), &g) == nil {
					w.gens++
				}
			} else {
				w.beat[strings.TrimPrefix(e.Key(), group.PrefixMember)]++
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *recordWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.beat)
	w.gens = 0
}

func (w *recordWatch) beats(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.beat[id]
}

func (w *recordWatch) generations() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gens
}
