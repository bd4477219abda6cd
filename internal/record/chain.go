package record

import (
	"fmt"

	"github.com/handoffhq/handoff/changelog"
)

// Chain summarizes a task's changelog.
type Chain struct {
	Task    string
	Commits int
	Markers int
	// Releases counts the release entries: each is a direct hand-off.
	Releases int
	// Epochs lists the epochs the markers and release entries begin, in
	// order.
	Epochs []uint64
	// Violations describes every break of the one-writer chain: a marker
	// whose epoch goes down, a release entry that does not raise it, or a
	// commit whose epoch is not the epoch of the latest marker or release
	// entry before it (a stale owner's write that got in).
	Violations []string
}

// CheckChain checks that recs form one chain: markers' epochs never go
// down, a release entry raises the epoch (it begins its successor's), and
// every commit carries the epoch of the latest marker or release entry.
func CheckChain(task string, recs []changelog.Record) Chain {
	c := Chain{Task: task}
	var epoch uint64
	seen := false
	for _, r := range recs {
		switch r.Entry.Kind {
		case changelog.KindRelease:
			c.Releases++
			if !seen || r.Entry.Epoch <= epoch {
				c.Violations = append(c.Violations, fmt.Sprintf("seq %d: release entry to epoch %d after epoch %d", r.Seq, r.Entry.Epoch, epoch))
			}
			epoch, seen = r.Entry.Epoch, true
			c.Epochs = append(c.Epochs, r.Entry.Epoch)
		case changelog.KindEpoch:
			c.Markers++
			if seen && r.Entry.Epoch < epoch {
				c.Violations = append(c.Violations, fmt.Sprintf("seq %d: epoch marker %d after epoch %d", r.Seq, r.Entry.Epoch, epoch))
			}
			epoch, seen = r.Entry.Epoch, true
			c.Epochs = append(c.Epochs, r.Entry.Epoch)
		case changelog.KindCommit:
			c.Commits++
			switch {
			case !seen:
				c.Violations = append(c.Violations, fmt.Sprintf("seq %d: commit at epoch %d before any epoch marker", r.Seq, r.Entry.Epoch))
			case r.Entry.Epoch != epoch:
				c.Violations = append(c.Violations, fmt.Sprintf("seq %d: commit at epoch %d while epoch %d owns the task", r.Seq, r.Entry.Epoch, epoch))
			}
		}
	}
	return c
}

// Acked is a commit a worker was told succeeded.
type Acked struct {
	Task  string
	Seq   uint64
	Epoch uint64
}

// MissingAcks returns the acknowledged commits that are not in recs as a
// commit of the same epoch: each one is a lost acknowledged write.
func MissingAcks(recs []changelog.Record, acks []Acked) []Acked {
	bySeq := make(map[uint64]changelog.Entry, len(recs))
	for _, r := range recs {
		bySeq[r.Seq] = r.Entry
	}
	var missing []Acked
	for _, a := range acks {
		e, ok := bySeq[a.Seq]
		if !ok || e.Kind != changelog.KindCommit || e.Epoch != a.Epoch {
			missing = append(missing, a)
		}
	}
	return missing
}
