package natsembed_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/natsembed"
)

func start(t *testing.T, opts natsembed.Options) *natsembed.Server {
	t.Helper()
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	opts.Logger = zerolog.Nop()
	s, err := natsembed.Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func TestStartPublishRestart(t *testing.T) {
	dir := t.TempDir()
	s := start(t, natsembed.Options{DataDir: dir, ServerName: "embedded-test"})
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") || strings.HasSuffix(s.ClientURL(), ":0") {
		t.Fatalf("ClientURL = %q, want a real port on 127.0.0.1", s.ClientURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for name, connect := range map[string]func() (*nats.Conn, error){
		"tcp":        func() (*nats.Conn, error) { return nats.Connect(s.ClientURL()) },
		"in-process": func() (*nats.Conn, error) { return s.InProcessConn(nats.Name("test")) },
	} {
		nc, err := connect()
		if err != nil {
			t.Fatalf("%s connect: %v", name, err)
		}
		js, _ := jetstream.New(nc)
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
			t.Fatalf("%s: create stream: %v", name, err)
		}
		if _, err := js.Publish(ctx, "s."+strings.ReplaceAll(name, "-", ""), []byte(name)); err != nil {
			t.Fatalf("%s: publish: %v", name, err)
		}
		nc.Close()
	}
	s.Shutdown()
	s.Shutdown() // idempotent

	// Same data dir: the stream and its messages are still there.
	s2 := start(t, natsembed.Options{DataDir: dir})
	nc, err := s2.InProcessConn()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	if n := st.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("stream holds %d messages after restart, want 2", n)
	}
	msg, err := st.GetLastMsgForSubject(ctx, "s.inprocess")
	if err != nil || string(msg.Data) != "in-process" {
		t.Errorf("last message = %v, %v", msg, err)
	}
}

func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	start(t, natsembed.Options{DataDir: dir})
	_, err := natsembed.Start(natsembed.Options{DataDir: dir, Listen: "127.0.0.1:0", Logger: zerolog.Nop()})
	if !errors.Is(err, natsembed.ErrLocked) {
		t.Fatalf("second Start on one data dir = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name the directory", err)
	}
}

func TestAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	dir := t.TempDir()
	_, err = natsembed.Start(natsembed.Options{DataDir: dir, Listen: addr, Logger: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a taken address = %v, want an error naming %s as in use", err, addr)
	}
	// The failed start released the data dir.
	start(t, natsembed.Options{DataDir: dir})
}

func TestBadOptions(t *testing.T) {
	for name, opts := range map[string]natsembed.Options{
		"no data dir": {Listen: "127.0.0.1:0"},
		"no port":     {DataDir: t.TempDir(), Listen: "127.0.0.1"},
		"bad port":    {DataDir: t.TempDir(), Listen: "127.0.0.1:http"},
	} {
		if s, err := natsembed.Start(opts); err == nil {
			s.Shutdown()
			t.Errorf("Start(%s) = nil error", name)
		}
	}
}

func TestOpenListenRefused(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.com:0"} {
		_, err := natsembed.Start(natsembed.Options{DataDir: t.TempDir(), Listen: listen, Logger: zerolog.Nop()})
		if !errors.Is(err, natsembed.ErrNoAuth) {
			t.Errorf("Start on %s without credentials = %v, want ErrNoAuth", listen, err)
		}
	}
	for _, host := range []string{"127.0.0.1", "127.0.0.2", "::1", "localhost", "LocalHost"} {
		if !natsembed.Loopback(host) {
			t.Errorf("Loopback(%q) = false, want true", host)
		}
	}
}

func TestCredentials(t *testing.T) {
	for name, opts := range map[string]natsembed.Options{
		"token":         {Token: "s3cret-token"},
		"user password": {User: "bob", Password: "s3cret-pass"},
	} {
		t.Run(name, func(t *testing.T) {
			opts.DataDir, opts.Listen = t.TempDir(), "0.0.0.0:0" // credentials make any address acceptable
			s := start(t, opts)
			url := strings.Replace(s.ClientURL(), "0.0.0.0", "127.0.0.1", 1)

			if nc, err := nats.Connect(url); err == nil {
				nc.Close()
				t.Fatal("a client without credentials connected")
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("connect without credentials = %v, want an authorization error", err)
			}
			auth := nats.Token(opts.Token)
			if opts.User != "" {
				auth = nats.UserInfo(opts.User, opts.Password)
			}
			nc, err := nats.Connect(url, auth)
			if err != nil {
				t.Fatalf("connect with the credentials: %v", err)
			}
			nc.Close()
			// The agent's own connection presents them without being told.
			nc, err = s.InProcessConn()
			if err != nil {
				t.Fatalf("in-process connect: %v", err)
			}
			nc.Close()
		})
	}
	for name, opts := range map[string]natsembed.Options{
		"token and user":    {Token: "t", User: "u", Password: "p"},
		"user, no password": {User: "u"},
	} {
		if s, err := natsembed.Start(natsembed.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Token: opts.Token, User: opts.User, Password: opts.Password}); err == nil {
			s.Shutdown()
			t.Errorf("Start with %s = nil error", name)
		}
	}
}
