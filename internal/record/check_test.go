package record

import (
	"strings"
	"testing"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/countworker"
)

// commitRec is a counter's commit at epoch that reaches input seq cp.
func commitRec(seq uint64, epoch, cp uint64, puts ...string) changelog.Record {
	r := rec(seq, changelog.KindCommit, epoch, puts...)
	r.Entry.Checkpoint = countworker.EncodeCheckpoint(cp)
	return r
}

func TestCheckTask(t *testing.T) {
	const m, rl = changelog.KindEpoch, changelog.KindRelease
	good := []changelog.Record{rec(1, m, 1), commitRec(2, 1, 10, "k1", "2"), rec(3, rl, 2), commitRec(4, 2, 12, "k1", "3", "k2", "1")}
	want := Want{Counts: map[string]uint64{"k1": 3, "k2": 1}, End: 12}
	tests := []struct {
		name    string
		recs    []changelog.Record
		acks    []Acked
		want    Want
		problem string // "" if exact
	}{
		{"exact", good, []Acked{{"t", 2, 1}, {"t", 4, 2}}, want, ""},
		{"no acknowledgements seen", good, nil, want, ""},
		{"acknowledged to a stale owner", good, []Acked{{"t", 2, 1}, {"t", 5, 1}}, want, "stale owner"},
		{"acknowledged and lost", good, []Acked{{"t", 6, 2}}, want, "missing"},
		{"a count off", good, nil, Want{Counts: map[string]uint64{"k1": 4, "k2": 1}, End: 12}, `key "k1"`},
		{"the checkpoint short of the input", good, nil, Want{Counts: want.Counts, End: 13}, "input ends at 13"},
		{"a stale commit in the chain", append(good[:4:4], commitRec(5, 1, 12)), nil, want, "while epoch 2 owns"},
		{"history keys", append(good[:4:4], commitRec(5, 2, 12, HistoryKeyPrefix+"1", "x")), nil, Want{Counts: want.Counts, End: 12, HistoryKeys: 1}, ""},
		{"history keys missing", good, nil, Want{Counts: want.Counts, End: 12, HistoryKeys: 1}, "pre-loaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckTask("t", tt.recs, tt.acks, tt.want)
			ps := strings.Join(got.Problems(), "; ")
			switch {
			case tt.problem == "" && (!got.Exact || ps != ""):
				t.Errorf("CheckTask = not exact (%s), want exact", ps)
			case tt.problem != "" && (got.Exact || !strings.Contains(ps, tt.problem)):
				t.Errorf("CheckTask = exact %v (%s), want a problem with %q", got.Exact, ps, tt.problem)
			}
		})
	}
	if got := CheckTask("t", good, nil, want); got.Counted != 4 || got.Releases != 1 || got.Checkpoint != 12 {
		t.Errorf("CheckTask counted %d, releases %d, checkpoint %d; want 4, 1, 12", got.Counted, got.Releases, got.Checkpoint)
	}
	if s := Summary([]TaskCheck{CheckTask("t", good, []Acked{{"t", 5, 1}}, want)}); !strings.HasPrefix(s, "NOT EXACT") {
		t.Errorf("Summary with a stale acknowledgement = %q, want NOT EXACT", s)
	}
	// An exact check claims nothing of acknowledgements it was not given.
	if s := Summary([]TaskCheck{CheckTask("t", good, nil, want)}); !strings.Contains(s, "no worker's acknowledgements were checked") {
		t.Errorf("Summary without acknowledgements = %q, want it to say none were checked", s)
	}
	if s := Summary([]TaskCheck{CheckTask("t", good, []Acked{{"t", 4, 2}}, want)}); !strings.Contains(s, "none of 1 acknowledged commits lost") {
		t.Errorf("Summary with one good acknowledgement = %q, want it to count it", s)
	}
}
