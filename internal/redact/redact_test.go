package redact_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/redact"
)

func TestURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"password", "nats://bob:PASS@n1:4222", "nats://bob:xxxxx@n1:4222"},
		{"token", "nats://s3cr3t@n1:4222", "nats://xxxxx@n1:4222"},
		{"no user info", "nats://n1:4222", "nats://n1:4222"},
		{"user with empty password", "nats://bob:@n1:4222", "nats://bob:@n1:4222"},
		{"list", "nats://a:p1@n1:4222,nats://n2:4222,tls://b:p2@n3", "nats://a:xxxxx@n1:4222,nats://n2:4222,tls://b:xxxxx@n3"},
		{"in a sentence", `cannot reach NATS at nats://bob:PASS@n1:4222: dial tcp`, `cannot reach NATS at nats://bob:xxxxx@n1:4222: dial tcp`},
		{"quoted by url.Parse", `parse "nats://bob:PASS@n1:x": invalid port`, `parse "nats://bob:xxxxx@n1:x": invalid port`},
		{"at sign in the path is not user info", "http://h/a@b", "http://h/a@b"},
		{"e-mail address is not a URL", "mail bob@example.com", "mail bob@example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact.URL(tt.in); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestURLSecrets(t *testing.T) {
	got := redact.URLSecrets("nats://bob:p%40ss@n1,nats://n2,nats://tok@n3")
	want := []string{"p%40ss", "p@ss", "tok"}
	if !slices.Equal(got, want) {
		t.Errorf("URLSecrets = %q, want %q", got, want)
	}
}

func TestRedactor(t *testing.T) {
	r := redact.New("hunter2", "", `a"b`)
	for in, want := range map[string]string{
		"token hunter2 and nats://u:other@h": "token xxxxx and nats://u:xxxxx@h",
		`{"msg":"pw a\"b"}`:                  `{"msg":"pw xxxxx"}`,
		"nothing secret":                     "nothing secret",
	} {
		if got := r.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestError(t *testing.T) {
	r := redact.New("hunter2")
	err := r.Error(fmt.Errorf("open with hunter2: %w", fs.ErrNotExist))
	if got, want := err.Error(), "open with xxxxx: file does not exist"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("the masked error no longer wraps fs.ErrNotExist")
	}
	if wrapped := fmt.Errorf("start: %w", err); bytes.Contains([]byte(wrapped.Error()), []byte("hunter2")) {
		t.Errorf("a wrap of the masked error shows the secret: %v", wrapped)
	}
	if r.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

// TestWriterMasksZerologEscapes logs secrets that JSON escapes through
// zerolog, as the agent's logger does.
func TestWriterMasksZerologEscapes(t *testing.T) {
	for _, secret := range []string{`pa"ss<&>`, "tab\there", `back\slash`} {
		var buf bytes.Buffer
		log := zerolog.New(redact.New(secret).Writer(&buf))
		log.Info().Str("pw", secret).Msg(secret)
		if line := buf.String(); strings.Count(line, redact.Mask) != 2 {
			t.Errorf("secret %q: logged %s, want it masked twice", secret, line)
		}
	}
}

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := redact.New("hunter2").Writer(&buf)
	line := []byte("{\"url\":\"nats://bob:hunter2@h\",\"msg\":\"hunter2\"}\n")
	n, err := w.Write(line)
	if err != nil || n != len(line) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(line))
	}
	if got, want := buf.String(), "{\"url\":\"nats://bob:xxxxx@h\",\"msg\":\"xxxxx\"}\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}
