package connector

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connections of the "jetstream" source and sink.
//
// Both connect to the NATS server at the configured url with their own
// connection (one per subtask), authenticated and encrypted as configured:
// at most one of a credentials file (creds), an NKey seed file (nkey),
// user and password, or a token; TLS with a CA file (tlsCA) and optionally a
// client certificate and key (tlsCert with tlsKey). A tls:// URL or a
// server that requires TLS turns TLS on with the system's roots when no CA
// is given. Files are read when the connector opens, not when the
// configuration is validated.

// Headers the sink writes and the source reads by default.
const (
	jsKeyHeader       = "Wstream-Key"
	jsTimestampHeader = "Wstream-Timestamp"
)

// jsConnectTimeout bounds connecting and every JetStream API call made
// outside the record path (stream lookups, object store calls).
const jsConnectTimeout = 10 * time.Second

// Dialer connects to the cluster's own NATS server, in the account of the
// job's owner, for connectors whose configuration names no url.
type Dialer func(name string) (*nats.Conn, error)

// Dialed is implemented by connectors that can use the cluster's own NATS
// server; the runtime calls SetDialer before Open.
type Dialed interface{ SetDialer(Dialer) }

// Replicated is implemented by Dialed connectors that create streams or
// stores: on the cluster's own server they keep the cluster's replica
// count (wstream server --replicas), which the runtime passes with
// SetReplicas after SetDialer.
type Replicated interface{ SetReplicas(int) }

// jsConn is the connection configuration both connectors embed, so that
// both take the same fields under the same JSON names (which Reach and the
// exact-name decoding of a configuration check).
type jsConn struct {
	URL      string `json:"url"` // "" = the cluster's own server, as the job's owner
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	TLSCA    string `json:"tlsCA"`
	TLSCert  string `json:"tlsCert"`
	TLSKey   string `json:"tlsKey"`
}

// reach lists the connection fields set: each reaches beyond the cluster's
// own server as the job's owner.
func (a *jsConn) reach() []Reach {
	out := reachOf(ReachServer, [2]string{"url", a.URL})
	out = append(out, reachOf(ReachHostFile, [2]string{"creds", a.Creds}, [2]string{"nkey", a.NKey},
		[2]string{"tlsCA", a.TLSCA}, [2]string{"tlsCert", a.TLSCert}, [2]string{"tlsKey", a.TLSKey})...)
	return append(out, reachOf(ReachCredential, [2]string{"user", a.User}, [2]string{"password", a.Password}, [2]string{"token", a.Token})...)
}

// check validates the connection fields of connector's configuration.
func (a *jsConn) check(connector string) error {
	if a.URL != "" && strings.TrimSpace(a.URL) == "" {
		// connect would hand it to nats.Connect, which dials its default
		// address for a blank one.
		return &ConfigError{Connector: connector, Field: "url", Message: "blank: leave it out to use the cluster's own NATS server"}
	}
	if a.URL == "" {
		// The cluster's own server, as the job's owner: credentials and
		// TLS files belong to another server.
		for _, f := range []struct{ name, v string }{{"creds", a.Creds}, {"nkey", a.NKey}, {"user", a.User}, {"password", a.Password},
			{"token", a.Token}, {"tlsCA", a.TLSCA}, {"tlsCert", a.TLSCert}, {"tlsKey", a.TLSKey}} {
			if f.v != "" {
				return &ConfigError{Connector: connector, Field: f.name, Message: "needs url: without one the connector uses the cluster's own NATS server and the job's credentials"}
			}
		}
		return nil
	}
	methods := []string{}
	if a.Creds != "" {
		methods = append(methods, "creds")
	}
	if a.NKey != "" {
		methods = append(methods, "nkey")
	}
	if a.User != "" || a.Password != "" {
		methods = append(methods, "user/password")
	}
	if a.Token != "" {
		methods = append(methods, "token")
	}
	if len(methods) > 1 {
		return &ConfigError{Connector: connector, Message: "give at most one way to authenticate, not " + strings.Join(methods, " and ")}
	}
	if a.Password != "" && a.User == "" {
		return &ConfigError{Connector: connector, Field: "user", Message: "missing: a password needs a user"}
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return &ConfigError{Connector: connector, Field: "tlsCert", Message: "tlsCert and tlsKey go together: give both or neither"}
	}
	return nil
}

// connect opens a connection for what ("connector jetstream: source S"),
// named name in the server's monitoring; dial reaches the cluster's server
// when URL is empty.
func (a *jsConn) connect(dial Dialer, what, name string, jsOpts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	if a.URL == "" {
		if dial == nil {
			return nil, nil, fmt.Errorf("%s: no url, and the runtime offers no connection to the cluster's NATS server", what)
		}
		nc, err := dial(name)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: connecting to the cluster's NATS server: %w", what, err)
		}
		js, err := jetstream.New(nc, jsOpts...)
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		return nc, js, nil
	}
	opts := []nats.Option{nats.Name(name), nats.Timeout(jsConnectTimeout), nats.MaxReconnects(-1)}
	switch {
	case a.Creds != "":
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NKey != "":
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: nkey seed file %s: %w", what, a.NKey, err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	nc, err := nats.Connect(a.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: connect to %s: %w", what, a.URL, err)
	}
	js, err := jetstream.New(nc, jsOpts...)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	return nc, js, nil
}

// checkStreamName refuses names JetStream does not accept.
func checkStreamName(connector, field, name string) error {
	if name == "" {
		return &ConfigError{Connector: connector, Field: field, Message: "missing: the JetStream stream"}
	}
	if strings.ContainsAny(name, " \t\r\n.*>/\\") {
		return &ConfigError{Connector: connector, Field: field, Message: fmt.Sprintf("%q is not a stream name (no whitespace, '.', '*', '>', '/' or '\\')", name)}
	}
	return nil
}

// validSubject reports whether s is a NATS subject: non-empty tokens
// separated by '.', no whitespace; with wildcards, '*' and '>' only as
// whole tokens and '>' only last.
func validSubject(s string, wildcards bool) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n\x00") {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" {
			return false
		}
		if strings.ContainsAny(t, "*>") {
			if !wildcards || len(t) != 1 || (t == ">" && i != len(toks)-1) {
				return false
			}
		}
	}
	return true
}

// apiContext bounds one JetStream API call.
func apiContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, jsConnectTimeout)
}
