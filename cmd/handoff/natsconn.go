package main

import (
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/redact"
)

// connect dials the NATS server named by n with its credentials and TLS
// settings. The connection reconnects forever: the agent rides out a NATS
// restart.
func connect(n nats, name string, log zerolog.Logger) (*natsgo.Conn, error) {
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
		return nil, redact.New(n.secrets()...).Error(fmt.Errorf("cannot reach NATS at %s: %w (is the server running and the URL right? leave --nats empty to run an embedded server)", redact.URL(n.URL), err))
	}
	return nc, nil
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
