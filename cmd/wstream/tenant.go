package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// authDir is where a server keeps its tenant authority: --auth-dir, or
// DATA/auth.
func authDir(c *cli.Context) string {
	if d := c.String("auth-dir"); d != "" {
		return d
	}
	return filepath.Join(c.String("data"), "auth")
}

var authDirFlag = &cli.StringFlag{Name: "auth-dir", Usage: "directory of the tenant authority: operator, accounts and their keys (default DATA/auth)"}

// AdminCredsFile and WorkerCredsFile are the credentials a server with
// tenants writes into its authority directory.
const (
	adminCredsFile  = "admin.creds"
	workerCredsFile = "worker.creds"
	// adminTokenFile holds the admin's REST API token.
	adminTokenFile = "admin.token"
	// firstWorker is the id of the worker whose credentials are
	// workerCredsFile; `tenant worker-creds` mints more.
	firstWorker = "worker"
)

// openAuthority opens (creating on first use) the authority in dir and
// writes the admin's and the first worker's credentials files and the
// configuration an external NATS server needs. A worker.creds of an older
// server, whose user had the admin's rights, is revoked and replaced.
func openAuthority(dir string) (*tenant.Authority, error) {
	a, err := tenant.Open(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		file string
		mint func() (tenant.Creds, error)
	}{
		{adminCredsFile, func() (tenant.Creds, error) { return a.AdminUser("admin") }},
		{workerCredsFile, func() (tenant.Creds, error) { return a.WorkerUser(firstWorker) }},
	} {
		p := filepath.Join(dir, f.file)
		if b, err := os.ReadFile(p); err == nil {
			if f.file != workerCredsFile {
				continue
			}
			j, err := jwt.ParseDecoratedJWT(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if _, ok := tenant.WorkerName(j); ok {
				continue
			}
			uc, err := jwt.DecodeUserClaims(j)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if err := a.RevokeServiceUser(uc.Subject); err != nil {
				return nil, err
			}
		}
		cr, err := f.mint()
		if err != nil {
			return nil, err
		}
		b, err := cr.File()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
			return nil, err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return nil, err
		}
	}
	if p := filepath.Join(dir, adminTokenFile); !exists(p) {
		tok, err := a.IssueAPIToken(tenant.Admin)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// defaultAdminCreds adds the local server's admin credentials when the
// command names no credentials and talks to the server of --data.
func defaultAdminCreds(c *cli.Context, opts []nats.Option) []nats.Option {
	if c.String("nats-creds") != "" || c.String("nats-nkey") != "" || c.String("nats-user") != "" || c.String("nats-token") != "" {
		return opts
	}
	p := filepath.Join(authDir(c), adminCredsFile)
	if _, err := os.Stat(p); err != nil {
		return opts
	}
	return append(opts, nats.UserCredentials(p))
}

func quotaFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "jobs", Usage: fmt.Sprintf("jobs the tenant may run at once (default %d)", tenant.DefaultQuotas.Jobs)},
		&cli.IntFlag{Name: "subtasks", Usage: fmt.Sprintf("subtasks its running jobs may hold together (default %d)", tenant.DefaultQuotas.Subtasks)},
		&cli.IntFlag{Name: "parallelism", Usage: fmt.Sprintf("largest parallelism of a vertex (default %d)", tenant.DefaultQuotas.Parallelism)},
		&cli.IntFlag{Name: "memory", Usage: fmt.Sprintf("linear memory of one operator instance, MiB (default %d)", tenant.DefaultQuotas.MemoryMiB)},
		&cli.Int64Flag{Name: "state-bytes", Usage: fmt.Sprintf("keyed state of one subtask on a worker's disk, bytes (default %d)", tenant.DefaultQuotas.StateBytes)},
		&cli.Int64Flag{Name: "state-write-rate", Usage: fmt.Sprintf("keyed state the tenant's subtasks on one worker write to its disk, bytes per second; past it they wait between inputs (default %d)", tenant.DefaultQuotas.StateWriteRate)},
		&cli.Int64Flag{Name: "storage-bytes", Usage: fmt.Sprintf("JetStream file storage of the tenant's account, bytes (default %d)", tenant.DefaultQuotas.StorageBytes)},
		&cli.Int64Flag{Name: "memory-storage-bytes", Usage: fmt.Sprintf("JetStream memory storage, bytes (default %d)", tenant.DefaultQuotas.MemoryStorageBytes)},
		&cli.Int64Flag{Name: "streams", Usage: fmt.Sprintf("JetStream streams, buckets and object stores (default %d)", tenant.DefaultQuotas.Streams)},
		&cli.Int64Flag{Name: "module-bytes", Usage: fmt.Sprintf("size of one module of its jobs, bytes, within the server's and workers' --max-module-bytes (default %d)", tenant.DefaultQuotas.ModuleBytes)},
		&cli.IntFlag{Name: "weight", Usage: fmt.Sprintf("share of a worker's cores against other tenants (default %d)", tenant.DefaultQuotas.Weight)},
	}
}

func quotasFrom(c *cli.Context) (json.RawMessage, error) {
	q := tenant.Quotas{Jobs: c.Int("jobs"), Subtasks: c.Int("subtasks"), Parallelism: c.Int("parallelism"), MemoryMiB: c.Int("memory"),
		StateBytes: c.Int64("state-bytes"), StateWriteRate: c.Int64("state-write-rate"), StorageBytes: c.Int64("storage-bytes"), MemoryStorageBytes: c.Int64("memory-storage-bytes"),
		Streams: c.Int64("streams"), ModuleBytes: c.Int64("module-bytes"), Weight: c.Int("weight")}
	if err := q.Check(); err != nil {
		return nil, usageError{err}
	}
	b, _ := json.Marshal(q)
	return b, nil
}

// tenantRequest sends a tenant request to the coordinator as the admin.
func tenantRequest(c *cli.Context, req transport.TenantRequest) (*transport.TenantReply, error) {
	e, err := clientEngine(c)
	if err != nil {
		return nil, err
	}
	defer e.Close(context.Background())
	b, _ := json.Marshal(req)
	nc := e.Conn()
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	// The server refuses a publish these credentials may not make: stop
	// waiting for an answer then.
	var refused atomic.Pointer[error]
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), transport.SubjectTenant) {
			refused.Store(&err)
			cancel()
		}
	})
	msg, err := nc.RequestWithContext(ctx, transport.SubjectTenant, b)
	if p := refused.Load(); p != nil {
		return nil, fmt.Errorf("not authorized: these credentials may not manage tenants (%v); use the admin's (auth/admin.creds)", *p)
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return nil, errors.New("no coordinator answered: is `wstream server --tenants` running, and are these the admin's credentials?")
		}
		return nil, err
	}
	var r transport.TenantReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("bad answer from the coordinator: %w", err)
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	return &r, nil
}

// tenantFlags are the flags every tenant command that asks the cluster
// takes, and extra.
func tenantFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{natsFlag, dataFlag, authDirFlag}, extra...)
}

// writeTenantCreds writes a tenant's new credentials and REST API token
// where --creds-out and --token-out say.
func writeTenantCreds(c *cli.Context, name string, r *transport.TenantReply) error {
	out := c.String("creds-out")
	if out == "" {
		out = name + ".creds"
	}
	if err := os.WriteFile(out, []byte(r.Creds), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "credentials of tenant %s written to %s (use them with --nats-creds)\n", name, out)
	if r.APIToken == "" {
		return nil
	}
	tout := c.String("token-out")
	if tout == "" {
		tout = name + ".token"
	}
	if err := os.WriteFile(tout, []byte(r.APIToken+"\n"), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "REST API token of tenant %s written to %s (send it as Authorization: Bearer TOKEN)\n", name, tout)
	return nil
}

var tokenOutFlag = &cli.StringFlag{Name: "token-out", Usage: "write the tenant's REST API token to `FILE` (default NAME.token)"}

// tenantName is the one argument of a tenant command, a valid name.
func tenantName(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", usageError{fmt.Errorf("%s takes one argument, the tenant's name", c.Command.FullName())}
	}
	name := c.Args().First()
	if err := tenant.CheckName(name); err != nil {
		return "", usageError{err}
	}
	return name, nil
}

func tenantCommand() *cli.Command {
	return &cli.Command{
		Name:  "tenant",
		Usage: "manage the tenants of a cluster (`wstream server --tenants`); the admin's credentials are needed",
		Subcommands: []*cli.Command{
			{
				Name:  "init",
				Usage: "create the tenant authority (operator and accounts) and write the configuration an external NATS server needs",
				Flags: []cli.Flag{dataFlag, authDirFlag, &cli.StringFlag{Name: "conf", Usage: "write the nats-server configuration fragment to `FILE` (default AUTH/nats-server.conf)"},
					&cli.StringFlag{Name: "resolver-dir", Usage: "directory the external NATS server keeps account JWTs in", Value: "jwt"}},
				Action: initTenants,
			},
			{
				Name:      "add",
				Usage:     "add a tenant (a NATS account) and write its credentials and REST API token",
				ArgsUsage: "NAME",
				Flags:     tenantFlags(append(quotaFlags(), &cli.StringFlag{Name: "creds-out", Usage: "write the tenant's credentials to `FILE` (default NAME.creds)"}, tokenOutFlag)...),
				Action:    newTenantCreds(transport.TenantAdd),
			},
			{
				Name:      "creds",
				Usage:     "write new credentials and a new REST API token of a tenant",
				ArgsUsage: "NAME",
				Flags:     tenantFlags(&cli.StringFlag{Name: "creds-out", Usage: "write the credentials to `FILE` (default NAME.creds)"}, tokenOutFlag),
				Action:    newTenantCreds(transport.TenantCreds),
			},
			{
				Name:      "worker-creds",
				Usage:     "write the credentials of a worker: the worker runs with id NAME and may act as that worker only",
				ArgsUsage: "NAME",
				Flags:     tenantFlags(&cli.StringFlag{Name: "creds-out", Usage: "write the credentials to `FILE` (default NAME.creds)"}),
				Action:    workerCreds,
			},
			{
				Name:      "worker-revoke",
				Usage:     "revoke every credentials of a worker (its connections are closed)",
				ArgsUsage: "NAME",
				Flags:     tenantFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError{errors.New("tenant worker-revoke takes one argument, the worker's id")}
					}
					_, err := tenantRequest(c, transport.TenantRequest{Op: transport.TenantWorkerRevoke, Name: c.Args().First()})
					return err
				},
			},
			{
				Name:      "update",
				Usage:     "change a tenant's quotas (flags not given keep their value)",
				ArgsUsage: "NAME",
				Flags:     tenantFlags(quotaFlags()...),
				Action:    updateTenant,
			},
			{
				Name:      "remove",
				Usage:     "remove a tenant: its users are revoked (its jobs must have ended)",
				ArgsUsage: "NAME",
				Flags:     tenantFlags(),
				Action: func(c *cli.Context) error {
					name, err := tenantName(c)
					if err != nil {
						return err
					}
					_, err = tenantRequest(c, transport.TenantRequest{Op: transport.TenantRemove, Name: name})
					return err
				},
			},
			{
				Name:   "list",
				Usage:  "list the tenants and their quotas",
				Flags:  tenantFlags(outputFlag),
				Action: listTenants,
			},
		},
	}
}

func printTenants(c *cli.Context, r *transport.TenantReply) error {
	if asJSON, err := jsonOutput(c); asJSON || err != nil {
		if err != nil {
			return err
		}
		return tenantsJSON(c.App.Writer, r)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tJOBS\tSUBTASKS\tPARALLELISM\tMEMORY\tSTATE\tSTATE RATE\tSTORAGE\tMODULE\tWEIGHT\tSTATUS")
	for _, raw := range r.Tenants {
		var t tenant.Tenant
		if err := json.Unmarshal(raw, &t); err != nil {
			return err
		}
		q := t.Quotas.WithDefaults()
		status := "active"
		if t.Removed {
			status = "removed"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d MiB\t%s\t%s/s\t%s\t%s\t%d\t%s\n", t.Name, q.Jobs, q.Subtasks, q.Parallelism, q.MemoryMiB,
			size(q.StateBytes), size(q.StateWriteRate), size(q.StorageBytes), size(q.ModuleBytes), q.Weight, status)
	}
	return tw.Flush()
}

// size writes a byte count in binary units.
func size(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", f), "0"), ".") + " " + units[i]
}

// initTenants creates the tenant authority and writes what an external\n// NATS server needs to use it.
func initTenants(c *cli.Context) error {
	dir := authDir(c)
	a, err := openAuthority(dir)
	if err != nil {
		return err
	}
	conf := c.String("conf")
	if conf == "" {
		conf = filepath.Join(dir, "nats-server.conf")
	}
	if err := os.WriteFile(conf, []byte(a.ServerConfig(c.String("resolver-dir"))), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "tenant authority in %s\nNATS server configuration: %s (include it in the server's configuration)\nadmin credentials: %s\nworker credentials: %s\nadmin REST API token: %s\n",
		dir, conf, filepath.Join(dir, adminCredsFile), filepath.Join(dir, workerCredsFile), filepath.Join(dir, adminTokenFile))
	return nil
}

// workerCreds writes new credentials of worker NAME.
func workerCreds(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError{errors.New("tenant worker-creds takes one argument, the worker's id")}
	}
	name := c.Args().First()
	if err := tenant.CheckWorkerName(name); err != nil {
		return usageError{err}
	}
	r, err := tenantRequest(c, transport.TenantRequest{Op: transport.TenantWorkerCreds, Name: name})
	if err != nil {
		return err
	}
	out := c.String("creds-out")
	if out == "" {
		out = name + ".creds"
	}
	if err := os.WriteFile(out, []byte(r.Creds), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "credentials of worker %s written to %s (wstream worker --nats-creds %s)\n", name, out, out)
	return nil
}

// newTenantCreds is the action of tenant add (op TenantAdd: a new tenant
// with the quotas of the flags) and tenant creds (TenantCreds): the
// cluster answers with credentials, written where the flags say.
func newTenantCreds(op transport.TenantOp) cli.ActionFunc {
	return func(c *cli.Context) error {
		name, err := tenantName(c)
		if err != nil {
			return err
		}
		req := transport.TenantRequest{Op: op, Name: name}
		if op == transport.TenantAdd {
			if req.Quotas, err = quotasFrom(c); err != nil {
				return err
			}
		}
		r, err := tenantRequest(c, req)
		if err != nil {
			return err
		}
		return writeTenantCreds(c, name, r)
	}
}

// updateTenant changes the quotas the flags give and prints the tenant.
func updateTenant(c *cli.Context) error {
	name, err := tenantName(c)
	if err != nil {
		return err
	}
	q, err := quotasFrom(c)
	if err != nil {
		return err
	}
	r, err := tenantRequest(c, transport.TenantRequest{Op: transport.TenantUpdate, Name: name, Quotas: q})
	if err != nil {
		return err
	}
	return printTenants(c, r)
}

func listTenants(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError{errors.New("tenant list takes no arguments")}
	}
	r, err := tenantRequest(c, transport.TenantRequest{Op: transport.TenantList})
	if err != nil {
		return err
	}
	return printTenants(c, r)
}
