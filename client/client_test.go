package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

func TestClientCalls(t *testing.T) {
	ctx := context.Background()
	f := httpapitest.New()
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 2, Checkpoint: "cp"})
	f.Set("t2", httpapitest.Task{Role: api.RoleLearner, Epoch: 1})
	f.Set("t3", httpapitest.Task{Role: api.RoleActive, Epoch: 4})
	f.Revoke("t3")
	c := New(serveFake(t, f, httpapi.Options{}).URL + "/")

	tests := []struct {
		name    string
		call    func() (any, error)
		want    any
		wantErr []error // every one must match
	}{
		{name: "assignment", call: func() (any, error) {
			v, err := c.Assignment(ctx, 0, 0)
			return fmt.Sprint(len(v.Tasks), v.Revoke), err
		}, want: "3 [t3]"},
		{name: "commit", call: func() (any, error) {
			return c.Commit(ctx, "t1", api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: []byte("v")}}, Epoch: 2})
		}, want: api.CommitResult{Task: "t1", Seq: 1, Epoch: 2}},
		{name: "get", call: func() (any, error) {
			v, err := c.Get(ctx, "t1", []byte("k"))
			return string(v), err
		}, want: "v"},
		{name: "get missing key", call: func() (any, error) { return c.Get(ctx, "t1", []byte("nope")) },
			wantErr: []error{ErrNotFound, api.ErrNotFound}},
		{name: "get unknown task", call: func() (any, error) { return c.Get(ctx, "t9", []byte("k")) },
			wantErr: []error{ErrUnknownTask, api.ErrUnknownTask}},
		{name: "get learner task", call: func() (any, error) { return c.Get(ctx, "t2", []byte("k")) },
			wantErr: []error{ErrNotOwner, api.ErrNotOwner}},
		{name: "commit stale epoch", call: func() (any, error) {
			return c.Commit(ctx, "t1", api.CommitRequest{Checkpoint: []byte("cp2"), Epoch: 1})
		},
			wantErr: []error{ErrNotOwner}},
		{name: "commit empty key", call: func() (any, error) {
			return c.Commit(ctx, "t1", api.CommitRequest{Deletes: [][]byte{{}}})
		}, wantErr: []error{api.ErrInvalid}},
		{name: "invalid task ID", call: func() (any, error) { return c.Release(ctx, "a/b", 0) },
			wantErr: []error{api.ErrInvalid}},
		{name: "release not revoked", call: func() (any, error) { return c.Release(ctx, "t1", 0) },
			wantErr: []error{ErrNotRevoked, api.ErrNotRevoked}},
		{name: "release at another epoch", call: func() (any, error) { return c.Release(ctx, "t3", 9) },
			wantErr: []error{ErrNotOwner, api.ErrNotOwner}},
		{name: "release", call: func() (any, error) { return c.Release(ctx, "t3", 4) },
			want: api.ReleaseResult{Task: "t3", Epoch: 4}},
		{name: "scan", call: func() (any, error) {
			kvs, err := c.Scan(ctx, "t1", api.ScanOptions{})
			return fmt.Sprint(len(kvs)), err
		}, want: "1"},
		{name: "leave", call: func() (any, error) {
			st, err := c.Leave(ctx)
			return st.State, err
		}, want: api.StateLeaving},
		{name: "leave status", call: func() (any, error) { // the leave above is under way
			st, err := c.LeaveStatus(ctx)
			return st.State, err
		}, want: api.StateLeaving},
		{name: "group", call: func() (any, error) {
			g, err := c.Group(ctx)
			return g.Group, err
		}, want: "demo"},
		{name: "ready", call: func() (any, error) { return nil, c.Ready(ctx) }},
		{name: "not ready", call: func() (any, error) {
			f.SetReady(errors.New("joining"))
			return nil, c.Ready(ctx)
		}, wantErr: []error{ErrUnavailable, api.ErrUnavailable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.call()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				if tt.want != nil && fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("got %v, want %v", got, tt.want)
				}
				return
			}
			for _, w := range tt.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("err = %v, want one matching %v", err, w)
				}
			}
			var apiErr *Error
			if !errors.As(err, &apiErr) || apiErr.Status < 400 || apiErr.Message == "" {
				t.Errorf("err = %#v, want an *Error with a status and a message", err)
			}
		})
	}
}

func TestErrorIsOnlyItsCode(t *testing.T) {
	err := fmt.Errorf("commit: %w", &Error{Status: 409, Code: api.CodeNotOwner, Message: "m"})
	for _, other := range []error{ErrNotFound, ErrUnknownTask, ErrNotRevoked, ErrUnavailable, api.ErrNotFound} {
		if errors.Is(err, other) {
			t.Errorf("errors.Is(not_owner error, %v) = true, want false", other)
		}
	}
	if !errors.Is(err, ErrNotOwner) || !errors.Is(err, api.ErrNotOwner) {
		t.Errorf("not_owner error does not match ErrNotOwner and api.ErrNotOwner")
	}
}

func TestToken(t *testing.T) {
	f := httpapitest.New()
	srv := serveFake(t, f, httpapi.Options{Token: "s3cret"})
	if _, err := New(srv.URL).Assignment(context.Background(), 0, 0); !isCode(err, api.CodeUnauthorized) {
		t.Errorf("without token: err = %v, want unauthorized", err)
	}
	if _, err := New(srv.URL, WithToken("s3cret")).Assignment(context.Background(), 0, 0); err != nil {
		t.Errorf("with token: err = %v", err)
	}
}

func TestBinaryKeysRoundTrip(t *testing.T) {
	ctx := context.Background()
	f := httpapitest.New()
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	c := New(serveFake(t, f, httpapi.Options{}).URL)
	keys := [][]byte{{0x00, 0xff}, []byte("a/b"), []byte(".."), []byte("."), []byte("%"), []byte("?x#y"), []byte(" +"), []byte("é"), {'\n'}}
	for i, k := range keys {
		val := []byte{byte(i), 0x00, 0xff}
		if _, err := c.Commit(ctx, "t1", api.CommitRequest{Puts: []api.KV{{Key: k, Value: val}}}); err != nil {
			t.Fatalf("commit key %q: %v", k, err)
		}
		got, err := c.Get(ctx, "t1", k)
		if err != nil || !bytes.Equal(got, val) {
			t.Errorf("Get(%q) = %x, %v; want %x", k, got, err, val)
		}
	}
	kvs, err := c.Scan(ctx, "t1", api.ScanOptions{Prefix: []byte{0x00}})
	if err != nil || len(kvs) != 1 || !bytes.Equal(kvs[0].Key, keys[0]) {
		t.Errorf("Scan(prefix 00) = %v, %v; want the one key 00ff", kvs, err)
	}
}

func TestScanPages(t *testing.T) {
	ctx := context.Background()
	f := httpapitest.New()
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	var puts []api.KV
	for i := range 10 {
		puts = append(puts, api.KV{Key: fmt.Appendf(nil, "k%02d", i), Value: []byte("v")})
	}
	puts = append(puts, api.KV{Key: []byte("z"), Value: []byte("v")})
	c := New(serveFake(t, f, httpapi.Options{MaxScanLimit: 3}).URL)
	if _, err := c.Commit(ctx, "t1", api.CommitRequest{Puts: puts}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		o     api.ScanOptions
		first string
		n     int
	}{
		{"all", api.ScanOptions{}, "k00", 11},
		{"prefix", api.ScanOptions{Prefix: []byte("k")}, "k00", 10},
		{"limit over pages", api.ScanOptions{Limit: 5}, "k00", 5},
		{"start", api.ScanOptions{Prefix: []byte("k"), Start: []byte("k07")}, "k07", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kvs, err := c.Scan(ctx, "t1", tt.o)
			if err != nil || len(kvs) != tt.n || string(kvs[0].Key) != tt.first {
				t.Fatalf("Scan(%+v) = %d items, %v; want %d from %s", tt.o, len(kvs), err, tt.n, tt.first)
			}
			for i := 1; i < len(kvs); i++ {
				if bytes.Compare(kvs[i-1].Key, kvs[i].Key) >= 0 {
					t.Fatalf("Scan keys out of order or repeated: %s then %s", kvs[i-1].Key, kvs[i].Key)
				}
			}
		})
	}
}

func TestAssignmentLongPoll(t *testing.T) {
	f := httpapitest.New()
	c := New(serveFake(t, f, httpapi.Options{}).URL)
	v, err := c.Assignment(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan api.View, 1)
	go func() {
		nv, err := c.Assignment(context.Background(), v.Version, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- nv
	}()
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	select {
	case nv := <-got:
		if nv.Version <= v.Version {
			t.Errorf("long-poll returned version %d, want > %d", nv.Version, v.Version)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll did not return after the view changed")
	}
}

func TestConnectionsAreReused(t *testing.T) {
	f := httpapitest.New()
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	srv := httptest.NewUnstartedServer(httpapi.New(f, httpapi.Options{}).Handler())
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := New(srv.URL)
	ctx := context.Background()
	for range 20 {
		if _, err := c.Get(ctx, "t1", []byte("missing")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get = %v, want not found", err)
		}
		if _, err := c.Commit(ctx, "t1", api.CommitRequest{Checkpoint: []byte("cp")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("40 sequential calls opened %d connections, want 1", n)
	}
}

func TestNonJSONError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "bad gateway from a proxy", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	_, err := New(srv.URL).Assignment(context.Background(), 0, 0)
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != 502 || apiErr.Message != "bad gateway from a proxy" {
		t.Errorf("err = %#v, want *Error 502 with the body as message", err)
	}
}

// FuzzGetKey sends any key through the client, HTTP and the server, and
// checks that the Backend reads exactly that key.
func FuzzGetKey(f *testing.F) {
	for _, s := range []string{"a", "\x00\xff", "a/b", "..", "%2F", "?#", " +", "é"} {
		f.Add([]byte(s))
	}
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	srv := httptest.NewServer(httpapi.New(agent, httpapi.Options{}).Handler())
	defer srv.Close()
	c := New(srv.URL)
	f.Fuzz(func(t *testing.T, key []byte) {
		if len(key) == 0 || len(key) > httpapi.DefaultMaxKeyBytes {
			return
		}
		agent.SetValue("t1", string(key), string(key))
		got, err := c.Get(context.Background(), "t1", key)
		if err != nil || !bytes.Equal(got, key) {
			t.Fatalf("Get(%q) = %q, %v; want the key's own value", key, got, err)
		}
	})
}
