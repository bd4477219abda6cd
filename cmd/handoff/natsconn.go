package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/redact"
)

// connect dials the NATS server named by n with its credentials and TLS
// settings. The connection reconnects forever: the agent rides out a NATS
// restart.
func connect(n nats, name string, log zerolog.Logger, hint connectHint) (*natsgo.Conn, error) {
	opts := []natsgo.Option{
		natsgo.Name(name),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250 * time.Millisecond),
		natsgo.RetryOnFailedConnect(false),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("disconnected from NATS; reconnecting")
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("reconnected to NATS")
		}),
		clientErrors(log),
	}
	opts = append(opts, n.options()...)
	nc, err := natsgo.Connect(n.URL, opts...)
	if err != nil {
		// nats.go's errors may echo the URL, and with it a password.
		return nil, redact.New(n.secrets()...).Error(fmt.Errorf("cannot reach NATS at %s: %w (%s)", redact.URL(n.URL), err, hint.about(err)))
	}
	return nc, nil
}

// connectHint is what a failed connection's message suggests besides the
// credentials: the agent can run an embedded server instead, a tool that
// reads a group cannot.
type connectHint bool

const (
	hintEmbedded connectHint = true
	hintServer   connectHint = false
)

// about is the hint for err: the credentials when the server refused
// them, else the server and its URL.
func (h connectHint) about(err error) string {
	if authRefused(err) {
		return "the server refused the credentials: check --nats-token, or --nats-user and --nats-password, or --nats-creds, or the user in the URL"
	}
	if h == hintEmbedded {
		return "is the server running and the URL right? leave --nats empty to run an embedded server"
	}
	return "is the server running and the URL right?"
}

// authRefused tells whether err is a server's refusal of the client's
// credentials. On connect nats.go passes the server's words on as they
// are ("nats: Authorization Violation"), not always as its sentinels.
func authRefused(err error) bool {
	for _, e := range []error{natsgo.ErrAuthorization, natsgo.ErrAuthExpired, natsgo.ErrAuthRevoked, natsgo.ErrAccountAuthExpired} {
		if errors.Is(err, e) {
			return true
		}
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "authorization violation") || strings.Contains(msg, "authentication")
}

// options are the authentication and TLS options of n.
func (n nats) options() []natsgo.Option {
	var opts []natsgo.Option
	if n.Creds != "" {
		opts = append(opts, natsgo.UserCredentials(n.Creds))
	}
	if n.User != "" {
		opts = append(opts, natsgo.UserInfo(n.User, n.Password))
	}
	if n.Token != "" {
		opts = append(opts, natsgo.Token(n.Token))
	}
	if n.TLSCA != "" {
		opts = append(opts, natsgo.RootCAs(n.TLSCA))
	}
	if n.TLSCert != "" {
		opts = append(opts, natsgo.ClientCert(n.TLSCert, n.TLSKey))
	}
	return opts
}

// clientErrors makes the NATS client's asynchronous errors (a consumer
// the server no longer knows, a slow consumer) log lines of the agent, in
// its format: without a handler the client writes them raw to stderr. The
// agent's connection for restores copies its options, handler included.
func clientErrors(log zerolog.Logger) natsgo.Option {
	return natsgo.ErrorHandler(func(_ *natsgo.Conn, sub *natsgo.Subscription, err error) {
		e := log.Warn().Err(err).Str("component", "nats-client")
		if sub != nil {
			e = e.Str("subject", sub.Subject)
		}
		e.Msg("NATS client error")
	})
}
