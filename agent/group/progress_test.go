package group

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
)

// TestProgressEncoding: a report is published with its time as "at" and
// its generation, as members of every version read it, and decodes back
// to itself.
func TestProgressEncoding(t *testing.T) {
	p := Progress{
		LearnerProgress: api.LearnerProgress{Task: "t1", Member: "m1", Role: api.RoleLearner, Applied: 7, End: 9, Lag: 2,
			Updated: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		Generation: 12,
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, `"at":"2026-01-02T03:04:05Z"`) || !strings.Contains(s, `"generation":12`) || strings.Contains(s, `"updated"`) {
		t.Errorf("Marshal(%+v) = %s, want its time as \"at\", its generation, and no \"updated\"", p, s)
	}
	var back Progress
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != p {
		t.Errorf("Unmarshal(Marshal(p)) = %+v, want %+v", back, p)
	}
}
