package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/natsembed"
	"github.com/handoffhq/handoff/internal/natstest"
)

// queryCmd runs 'handoff query args...' and returns what it printed and
// its error.
func queryCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	e := &env{stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	err := run(context.Background(), append([]string{"query"}, args...), e)
	return out.String(), err
}

// A server that refuses the query's credentials (none, or the wrong
// token) gets a hint about them, not about the embedded server 'handoff
// query' does not have.
func TestQueryCredentialsHint(t *testing.T) {
	srv, err := natsembed.Start(natsembed.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Token: "right", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, args := range [][]string{{}, {"--nats-token", "wrong"}} {
		_, err := queryCmd(t, append(args, "--nats", srv.ClientURL(), "p-0", "k")...)
		if err == nil || !strings.Contains(err.Error(), "credentials") || !strings.Contains(err.Error(), "--nats-token") ||
			strings.Contains(err.Error(), "embedded") {
			t.Errorf("query %q against a server that needs a token = %v, want a hint about the credentials (--nats-token) and none about an embedded server", args, err)
		}
	}
	// A server that is not there: a hint about the server, still none
	// about an embedded one.
	addr := srv.ClientURL()
	srv.Shutdown()
	if _, err := queryCmd(t, "--nats", addr, "p-0", "k"); err == nil || !strings.Contains(err.Error(), "is the server running") ||
		strings.Contains(err.Error(), "embedded") {
		t.Errorf("query against no server = %v, want a hint about the server only", err)
	}
}

// Flags after TASK KEY are flags, as before them; after -- everything is
// the task and the key.
func TestQueryFlagsAfterTheKey(t *testing.T) {
	srv := natstest.Start(t)
	tests := []struct {
		args []string
		want string // in the error
	}{
		// The flags were read: the group named was looked for, and is not there.
		{[]string{"p-0", "k", "--min-seq", "99", "--nats", srv.URL, "--group", "nogroup"}, `group "nogroup" does not exist`},
		{[]string{"--nats", srv.URL, "p-0", "--group", "nogroup", "k"}, `group "nogroup" does not exist`},
		{[]string{"--nats", srv.URL, "p-0", "k", "--max-lag", "lots"}, `--max-lag "lots"`},
		{[]string{"--nats", srv.URL, "--group", "nogroup", "--", "p-0", "-k"}, `group "nogroup" does not exist`},
		{[]string{"--nats", srv.URL, "p-0"}, "query takes a task and a key"},
		{[]string{"--nats", srv.URL, "p-0", "k", "extra"}, "query takes a task and a key"},
	}
	for _, tt := range tests {
		if _, err := queryCmd(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("query %q = %v, want an error mentioning %s", tt.args, err, tt.want)
		}
	}
}
