package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/api"
)

// commitBody is a commit of n puts of 100-byte values.
func commitBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"puts":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"key":"a2V5LTAwMDAw","value":"%s"}`, strings.Repeat("QUFB", 33)+"QQ==")
	}
	b.WriteString(`],"checkpoint":"AAAAAAAAAAc=","epoch":3}`)
	return []byte(b.String())
}

// BenchmarkDecodeCommit compares the strict decoder with encoding/json
// alone on the same commit body: the price of the strict pass.
func BenchmarkDecodeCommit(b *testing.B) {
	body := commitBody(100)
	for name, decode := range map[string]func([]byte, any) error{"strict": decodeStrict, "encoding-json": json.Unmarshal} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var req api.CommitRequest
				if err := decode(body, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzStrictBase64 holds the hand-written base64 check to the standard
// library's strict decoder, which it must match except that it also refuses
// line breaks (which the decoder skips).
func FuzzStrictBase64(f *testing.F) {
	for _, s := range []string{"", "YQ==", "YR==", "YWI=", "YWJ=", "YWJj", "YQ", "Y===", "====", "YQ==YQ==", "-_8=", "/w==", "+/+/",
		"YW\nJj", "YWJj\r\n", "YQ=\n=", " YWJj", "YWJj ", "\x00\x00\x00\x00", "é==="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, stdErr := base64.StdEncoding.Strict().DecodeString(s)
		want := stdErr == nil && !strings.ContainsAny(s, "\r\n")
		if got := strictBase64([]byte(s)) == nil; got != want {
			t.Fatalf("strictBase64(%q) accepts = %v, want %v (standard strict decoder: %v)", s, got, want, stdErr)
		}
	})
}
