package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/redact"
	"github.com/handoffhq/handoff/internal/watchbuf"
)

// closedPort returns a local address that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestAgentErrorsMaskNATSSecrets starts agents whose NATS cannot be reached
// or whose URL is malformed: the error (and every log line) names the URL
// with its password masked.
func TestAgentErrorsMaskNATSSecrets(t *testing.T) {
	addr := closedPort(t)
	tests := []struct{ name, url string }{
		{"unreachable", "nats://bob:url-pass@" + addr},
		{"token in the URL", "nats://url-token-secret@" + addr},
		{"malformed URL", "nats://bob:url-pass@" + strings.Replace(addr, ":", ":x", 1)},
		{"second of a list", "nats://" + addr + ",nats://bob:url-pass@" + addr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			e := &env{stdout: &stderr, stderr: &stderr, getenv: func(k string) string {
				return map[string]string{"HANDOFF_NATS_PASSWORD": "flag-pass", "HANDOFF_API_TOKEN": "api-secret"}[k]
			}}
			err := run(context.Background(), []string{"agent", "--nats", tt.url, "--nats-user", "bob",
				"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json"}, e)
			if err == nil {
				t.Fatal("the agent started on an unreachable NATS")
			}
			if !strings.Contains(err.Error(), "cannot reach NATS") || !strings.Contains(err.Error(), redact.Mask) {
				t.Errorf("error %q does not say it cannot reach NATS at the masked URL", err)
			}
			for _, secret := range []string{"url-pass", "url-token-secret", "flag-pass", "api-secret"} {
				if strings.Contains(err.Error(), secret) || strings.Contains(stderr.String(), secret) {
					t.Errorf("secret %q shown:\nerror: %v\noutput: %s", secret, err, stderr.String())
				}
			}
		})
	}
}

// TestLoggerMasksSecrets logs the secrets the logger is built with, in both
// formats: none of them reaches the output.
func TestLoggerMasksSecrets(t *testing.T) {
	red := Config{APIToken: "api-secret", NATS: nats{URL: "nats://u:url-pass@h", Token: "nats-tok"}}.redactor()
	for _, format := range []string{"json", "console"} {
		var out bytes.Buffer
		log := newLogger(&out, "info", format, red)
		log.Info().Str("url", "nats://u:url-pass@h").Str("token", "api-secret").Msg("token nats-tok, url nats://x:other@h")
		for _, secret := range []string{"url-pass", "api-secret", "nats-tok", "other"} {
			if strings.Contains(out.String(), secret) {
				t.Errorf("%s log shows %q: %s", format, secret, out.String())
			}
		}
		if !strings.Contains(out.String(), redact.Mask) {
			t.Errorf("%s log has no mask: %s", format, out.String())
		}
		if format == "json" {
			var line map[string]any
			if err := json.Unmarshal(out.Bytes(), &line); err != nil {
				t.Errorf("masked JSON line does not parse: %v: %s", err, out.String())
			}
		}
	}
}

// TestEmbeddedNATSRequiresTheToken runs an agent whose embedded NATS server
// takes a token: a client without it is refused, a client with it (as a
// joining agent connects) gets in, and the token is never logged. The same
// agent's API answers to the names of --api-allowed-hosts and to no other.
func TestEmbeddedNATSRequiresTheToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an agent")
	}
	const token = "embedded-s3cret"
	ctx, cancel := context.WithCancel(context.Background())
	urls, apis := make(chan string, 1), make(chan string, 1)
	var once sync.Once
	stderr := &watchbuf.Buffer{OnWrite: func(s string) {
		for _, line := range strings.Split(s, "\n") {
			var ev struct{ Message, URL, API string }
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(ev.Message, "embedded NATS server started"):
				select {
				case urls <- ev.URL:
				default:
				}
			case ev.Message == "agent started":
				once.Do(func() { apis <- ev.API })
			}
		}
	}}
	done := make(chan error, 1)
	go func() {
		e := &env{stdout: stderr, stderr: stderr, getenv: func(string) string { return "" }}
		done <- run(ctx, []string{"agent", "--group", "auth", "--member-id", "m1", "--data-dir", t.TempDir(),
			"--listen", "127.0.0.1:0", "--embedded-nats-listen", "127.0.0.1:0", "--nats-token", token,
			"--log-format", "json", "--leave-timeout", "10s", "--api-allowed-hosts", "agent.test"}, e)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
		if strings.Contains(stderr.String(), token) {
			t.Errorf("the agent logged its NATS token:\n%s", stderr.String())
		}
	}()
	// await returns the field a log line delivers on ch, unless the agent
	// exits or takes too long.
	await := func(ch <-chan string, line string) string {
		select {
		case v := <-ch:
			return v
		case err := <-done:
			done <- err
			t.Fatalf("agent exited before logging %q: %v\n%s", line, err, stderr.String())
		case <-time.After(startDeadline):
			t.Fatalf("no %q line within %s:\n%s", line, startDeadline, stderr.String())
		}
		return ""
	}
	url := await(urls, "embedded NATS server started")
	if !strings.Contains(stderr.String(), "and the same --nats-token") {
		t.Errorf("the start line does not say that joining agents need the token:\n%s", stderr.String())
	}

	if nc, err := natsgo.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without the token connected to the embedded NATS server")
	} else if !errors.Is(err, natsgo.ErrAuthorization) {
		t.Fatalf("connect without the token: %v, want an authorization error", err)
	}
	nc, err := connect(nats{URL: url, Token: token}, "joiner", zerolog.Nop(), hintEmbedded)
	if err != nil {
		t.Fatalf("connect as a joining agent does, with --nats-token: %v", err)
	}
	nc.Close()

	// The agent itself got in with the token: it joins its group.
	api := await(apis, "agent started")
	for host, want := range map[string]int{"agent.test:80": 200, "localhost": 200, "attacker.example": 403} {
		req, _ := http.NewRequest("GET", "http://"+api+"/healthz", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /healthz with Host %s = %d, want %d", host, resp.StatusCode, want)
		}
	}
}
