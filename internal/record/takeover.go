package record

import (
	"github.com/handoffhq/handoff/changelog"
)

// AckedAfterTakeover returns the acknowledged commits that a stale owner
// got in after a newer owner took the task over: a commit at epoch e whose
// sequence follows an epoch marker or a release entry of a higher epoch. Each is a broken
// fence (a worker was told a write succeeded after it lost the task),
// whether or not the write is in recs as a commit.
func AckedAfterTakeover(recs []changelog.Record, acks []Acked) []Acked {
	type marker struct{ seq, epoch uint64 }
	var markers []marker
	for _, r := range recs {
		if begins(r.Entry) {
			markers = append(markers, marker{r.Seq, r.Entry.Epoch})
		}
	}
	var out []Acked
	for _, a := range acks {
		for _, m := range markers {
			if m.seq >= a.Seq {
				break
			}
			if m.epoch > a.Epoch {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// begins reports whether e begins an epoch: an epoch marker, or a release
// entry (its successor's).
func begins(e changelog.Entry) bool {
	return e.Kind == changelog.KindEpoch || e.Kind == changelog.KindRelease
}

// TakeoverSeq returns the sequence of the first epoch marker or release
// entry above epoch: from there on the owner at epoch is fenced. ok is
// false if the task was never taken over from epoch.
func TakeoverSeq(recs []changelog.Record, epoch uint64) (seq uint64, ok bool) {
	for _, r := range recs {
		if begins(r.Entry) && r.Entry.Epoch > epoch {
			return r.Seq, true
		}
	}
	return 0, false
}
