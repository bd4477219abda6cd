package record

import (
	"testing"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/statestore"
)

func rec(seq uint64, kind changelog.Kind, epoch uint64, puts ...string) changelog.Record {
	e := changelog.Entry{Kind: kind, Epoch: epoch}
	for i := 0; i+1 < len(puts); i += 2 {
		e.Puts = append(e.Puts, statestore.KV{Key: []byte(puts[i]), Value: []byte(puts[i+1])})
	}
	return changelog.Record{Seq: seq, Entry: e}
}

func TestCheckChain(t *testing.T) {
	const m, c, r = changelog.KindEpoch, changelog.KindCommit, changelog.KindRelease
	tests := []struct {
		name       string
		recs       []changelog.Record
		violations int
	}{
		{"empty", nil, 0},
		{"one owner", []changelog.Record{rec(1, m, 1), rec(2, c, 1), rec(5, c, 1)}, 0},
		{"handover", []changelog.Record{rec(1, m, 1), rec(2, c, 1), rec(3, m, 2), rec(4, c, 2)}, 0},
		{"same owner restarted", []changelog.Record{rec(1, m, 1), rec(2, c, 1), rec(3, m, 1), rec(4, c, 1)}, 0},
		{"stale commit after hand-off", []changelog.Record{rec(1, m, 1), rec(2, m, 2), rec(3, c, 1)}, 1},
		{"commit before marker", []changelog.Record{rec(1, c, 1)}, 1},
		{"epoch goes down", []changelog.Record{rec(1, m, 2), rec(2, m, 1)}, 1},
		{"direct hand-off", []changelog.Record{rec(1, m, 1), rec(2, c, 1), rec(3, r, 2), rec(4, c, 2)}, 0},
		{"the old owner commits after its release", []changelog.Record{rec(1, m, 1), rec(3, r, 2), rec(4, c, 1)}, 1},
		{"a release that does not raise the epoch", []changelog.Record{rec(1, m, 2), rec(2, r, 2)}, 1},
		{"a release before any owner", []changelog.Record{rec(1, r, 1)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckChain("t", tt.recs)
			if len(got.Violations) != tt.violations {
				t.Errorf("CheckChain(%s) violations = %v, want %d", tt.name, got.Violations, tt.violations)
			}
		})
	}
}

func TestMissingAcks(t *testing.T) {
	recs := []changelog.Record{rec(1, changelog.KindEpoch, 1), rec(2, changelog.KindCommit, 1, "a", "1"), rec(4, changelog.KindCommit, 1, "a", "2", "b", "1")}
	acks := []Acked{{Task: "t", Seq: 2, Epoch: 1}, {Task: "t", Seq: 3, Epoch: 1}, {Task: "t", Seq: 4, Epoch: 2}}
	missing := MissingAcks(recs, acks)
	if len(missing) != 2 || missing[0].Seq != 3 || missing[1].Seq != 4 {
		t.Errorf("MissingAcks = %+v, want seqs 3 (absent) and 4 (wrong epoch)", missing)
	}
}
