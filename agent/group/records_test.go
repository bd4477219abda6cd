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
}
