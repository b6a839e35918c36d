package main

import (
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"
)

// natsAuthFlags are nats.go's credentials and TLS options. Every command
// that takes --nats takes them too (withNATSAuth), so a cluster behind an
// authenticating, TLS-only NATS server needs nothing else.
var natsAuthFlags = []cli.Flag{
	&cli.StringFlag{Name: "nats-creds", Usage: "NATS credentials `FILE` (JWT and nkey seed, as `nsc` writes it)", EnvVars: []string{"WSTREAM_NATS_CREDS"}},
	&cli.StringFlag{Name: "nats-nkey", Usage: "NATS nkey seed `FILE`", EnvVars: []string{"WSTREAM_NATS_NKEY"}},
	&cli.StringFlag{Name: "nats-user", Usage: "NATS user name (with --nats-password)", EnvVars: []string{"WSTREAM_NATS_USER"}},
	&cli.StringFlag{Name: "nats-password", Usage: "NATS password", EnvVars: []string{"WSTREAM_NATS_PASSWORD"}},
	&cli.StringFlag{Name: "nats-token", Usage: "NATS authentication token", EnvVars: []string{"WSTREAM_NATS_TOKEN"}},
	&cli.StringFlag{Name: "nats-tls-ca", Usage: "CA certificate `FILE` that signs the NATS server's certificate"},
	&cli.StringFlag{Name: "nats-tls-cert", Usage: "client certificate `FILE` for NATS TLS (with --nats-tls-key)"},
	&cli.StringFlag{Name: "nats-tls-key", Usage: "client private key `FILE` for NATS TLS"},
}

// withNATSAuth adds natsAuthFlags to every command that has --nats.
func withNATSAuth(cmds []*cli.Command) []*cli.Command {
	for _, cmd := range cmds {
		withNATSAuth(cmd.Subcommands)
		for _, f := range cmd.Flags {
			if f == natsFlag {
				cmd.Flags = append(cmd.Flags, natsAuthFlags...)
				break
			}
		}
	}
	return cmds
}

// natsOptions turns the credentials and TLS flags into nats.go options,
// checking that the files they name exist, so that a typo is a usage error
// that names the flag rather than a failed connection.
func natsOptions(c *cli.Context) ([]nats.Option, error) {
	var opts []nats.Option
	file := func(flag string) (string, error) {
		p := c.String(flag)
		if p == "" {
			return "", nil
		}
		if _, err := os.Stat(p); err != nil {
			return "", usageError{fmt.Errorf("--%s %s: %w", flag, p, err)}
		}
		return p, nil
	}
	logins := 0
	for _, f := range []string{"nats-creds", "nats-nkey", "nats-user", "nats-token"} {
		if c.String(f) != "" {
			logins++
		}
	}
	if logins > 1 {
		return nil, usageError{fmt.Errorf("--nats-creds, --nats-nkey, --nats-user and --nats-token are alternatives: give one")}
	}
	if p, err := file("nats-creds"); err != nil {
		return nil, err
	} else if p != "" {
		opts = append(opts, nats.UserCredentials(p))
	}
	if p, err := file("nats-nkey"); err != nil {
		return nil, err
	} else if p != "" {
		o, err := nats.NkeyOptionFromSeed(p)
		if err != nil {
			return nil, usageError{fmt.Errorf("--nats-nkey %s: %w", p, err)}
		}
		opts = append(opts, o)
	}
	switch user, pass := c.String("nats-user"), c.String("nats-password"); {
	case user != "":
		opts = append(opts, nats.UserInfo(user, pass))
	case pass != "":
		return nil, usageError{fmt.Errorf("--nats-password needs --nats-user")}
	}
	if tok := c.String("nats-token"); tok != "" {
		opts = append(opts, nats.Token(tok))
	}
	ca, err := file("nats-tls-ca")
	if err != nil {
		return nil, err
	}
	if ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	cert, err := file("nats-tls-cert")
	if err != nil {
		return nil, err
	}
	key, err := file("nats-tls-key")
	if err != nil {
		return nil, err
	}
	switch {
	case cert != "" && key != "":
		opts = append(opts, nats.ClientCert(cert, key))
	case cert != "" || key != "":
		return nil, usageError{fmt.Errorf("--nats-tls-cert and --nats-tls-key go together")}
	}
	return opts, nil
}
