package record

import (
	"testing"

	"github.com/handoffhq/handoff/changelog"
)

func TestAckedAfterTakeover(t *testing.T) {
	const m, c = changelog.KindEpoch, changelog.KindCommit
	recs := []changelog.Record{rec(1, m, 1), rec(2, c, 1), rec(5, m, 2), rec(6, c, 2)}
	acks := []Acked{
		{Task: "t", Seq: 2, Epoch: 1}, // before the takeover
		{Task: "t", Seq: 6, Epoch: 2}, // the new owner
		{Task: "t", Seq: 7, Epoch: 1}, // the stale owner, after the marker of 2
	}
	got := AckedAfterTakeover(recs, acks)
	if len(got) != 1 || got[0].Seq != 7 {
		t.Errorf("AckedAfterTakeover = %+v, want the ack at seq 7", got)
	}
	if seq, ok := TakeoverSeq(recs, 1); !ok || seq != 5 {
		t.Errorf("TakeoverSeq(1) = %d, %v; want 5, true", seq, ok)
	}
	if _, ok := TakeoverSeq(recs, 2); ok {
		t.Errorf("TakeoverSeq(2) found a takeover; want none")
	}
}

func TestCompareCounts(t *testing.T) {
	data := map[string][]byte{"a": []byte("3"), "b": []byte("x"), "c": []byte("1"), "e": []byte("2")}
	want := map[string]uint64{"a": 3, "b": 1, "d": 4, "e": 1, "z": 0}
	got := CompareCounts(data, want)
	// b undecodable, c unexpected, d missing, e wrong; a right, z absent and zero.
	if len(got) != 4 {
		t.Errorf("CompareCounts = %q, want 4 differences (b, c, d, e)", got)
	}
}
