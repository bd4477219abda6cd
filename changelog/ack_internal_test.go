package changelog

import "testing"

// TestParseAck: the plain acknowledgement gives its sequence; anything
// else is left to the JSON decoder.
func TestParseAck(t *testing.T) {
	l := &Log{ackPrefix: []byte(`{"stream":"HANDOFF_g","seq":`)}
	for _, tc := range []struct {
		name string
		data string
		seq  uint64
		ok   bool
	}{
		{"plain", `{"stream":"HANDOFF_g","seq":42}`, 42, true},
		{"more fields", `{"stream":"HANDOFF_g","seq":7,"domain":"hub"}`, 7, true},
		{"largest", `{"stream":"HANDOFF_g","seq":1234567890123456789}`, 1234567890123456789, true},
		{"other stream", `{"stream":"HANDOFF_h","seq":42}`, 0, false},
		{"error", `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"HANDOFF_g","seq":0}`, 0, false},
		{"error after", `{"stream":"HANDOFF_g","seq":0,"error":{"code":503}}`, 0, false},
		{"no digits", `{"stream":"HANDOFF_g","seq":}`, 0, false},
		{"cut", `{"stream":"HANDOFF_g","seq":42`, 0, false},
		{"not a number", `{"stream":"HANDOFF_g","seq":"42"}`, 0, false},
		{"too long", `{"stream":"HANDOFF_g","seq":123456789012345678901}`, 0, false},
		{"empty", ``, 0, false},
	} {
		if seq, ok := l.parseAck([]byte(tc.data)); seq != tc.seq || ok != tc.ok {
			t.Errorf("%s: parseAck(%s) = %d, %v; want %d, %v", tc.name, tc.data, seq, ok, tc.seq, tc.ok)
		}
	}
}
