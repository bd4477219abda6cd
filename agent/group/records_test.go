package group

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStoredNames pins the names members of different versions read from
// each other: the keys of the bucket and the generation record's field
// that names each member's assignment, which predate the Go names.
func TestStoredNames(t *testing.T) {
	if PrefixAssignment != "assign." || PrefixMember != "members." || KeyGeneration != "gen" || KeyLease != "lease" || KeyConfig != "config" {
		t.Errorf("keys = %q %q %q %q %q; stored keys must not change", PrefixAssignment, PrefixMember, KeyGeneration, KeyLease, KeyConfig)
	}
	b, err := json.Marshal(GenerationRecord{Generation: 3, Assignments: map[string]uint64{"m1": 7}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"entries":{"m1":7}`) {
		t.Errorf("generation record = %s; want the assignments' revisions under \"entries\"", b)
	}
	var g GenerationRecord
	if err := json.Unmarshal([]byte(`{"generation":3,"leader":"m1","entries":{"m2":9}}`), &g); err != nil || g.Assignments["m2"] != 9 {
		t.Errorf("decode an earlier version's record = %+v, %v; want Assignments m2=9", g, err)
	}
	// A compact record round-trips, and an earlier version, which reads
	// "entries" as a map, cannot decode it: it must not read a generation
	// that assigns nothing.
	b, err = json.Marshal(GenerationRecord{Generation: 4, Leader: "m1", Compact: true, Index: 12, Term: 5, Candidates: []string{"m2"}})
	if err != nil {
		t.Fatal(err)
	}
	var back GenerationRecord
	if err := json.Unmarshal(b, &back); err != nil || !back.Compact || back.Index != 12 || back.Term != 5 || back.Assignments != nil {
		t.Errorf("compact record %s decodes to %+v, %v", b, back, err)
	}
	var earlier struct {
		Generation uint64            `json:"generation"`
		Entries    map[string]uint64 `json:"entries"`
	}
	if err := json.Unmarshal(b, &earlier); err == nil {
		t.Errorf("an earlier version decodes compact record %s as %+v; want an error", b, earlier)
	}
}
