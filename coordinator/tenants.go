package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/connector"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// caller is who made a control-plane request: a tenant, or the admin (the
// service account's users; on a cluster without tenants, everyone).
type caller struct {
	tenant string // "" for the admin
	user   string // the NATS user's public key, when the server said
}

func (w caller) admin() bool { return w.tenant == "" }

func (w caller) String() string {
	if w.admin() {
		return tenant.Admin
	}
	return w.tenant
}

// requestInfo is the part of the server-set Nats-Request-Info header the
// audit log keeps.
type requestInfo struct {
	Account string `json:"acc"`
	User    string `json:"user"`
	Name    string `json:"name"`
}

// tenantCaller returns the tenant whose account sent m, which arrived on
// tenant.APIPrefix + ACCOUNT + "." + verb through the tenant's import:
// NATS puts the importing account there, so the subject cannot be forged.
func (c *Coordinator) tenantCaller(m *nats.Msg) (caller, error) {
	rest, ok := strings.CutPrefix(m.Subject, tenant.APIPrefix)
	acct, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || c.cfg.Tenants == nil {
		return caller{}, errors.New("not authorized")
	}
	t, found := c.cfg.Tenants.ByAccount(acct)
	if !found || t.Removed {
		return caller{}, fmt.Errorf("not authorized: account %s is no tenant", acct)
	}
	who := caller{tenant: t.Name}
	var ri requestInfo
	if h := m.Header.Get("Nats-Request-Info"); h != "" && json.Unmarshal([]byte(h), &ri) == nil {
		who.user = ri.User
	}
	return who, nil
}

// adminCaller is the caller of a request made in the service account.
func adminCaller(*nats.Msg) caller { return caller{} }

// handler is a control-plane request handler acting for a caller.
type handler func(m *nats.Msg, who caller)

// apiHandlers are the requests both the admin and tenants make.
func (c *Coordinator) apiHandlers() map[string]handler {
	return map[string]handler{
		"submit":    c.onSubmit,
		"cancel":    c.onCancel,
		"list":      c.onList,
		"workers":   c.onWorkers,
		"savepoint": c.onSavepoint,
		"upgrade":   c.onUpgrade,
		"tenant":    c.onTenant,
	}
}

// subscribeTenants subscribes to the tenants' requests.
func (c *Coordinator) subscribeTenants(nc *nats.Conn) error {
	for verb, h := range c.apiHandlers() {
		s, err := nc.Subscribe(tenant.APIPrefix+"*."+verb, c.tracked(func(m *nats.Msg) {
			who, err := c.tenantCaller(m)
			if err != nil {
				c.audit(caller{tenant: "?"}, verb, "", err)
				respond(m, transport.Reply{Error: err.Error()})
				return
			}
			h(m, who)
		}))
		if err != nil {
			return fmt.Errorf("coordinator: subscribing to tenants' %s requests: %w", verb, err)
		}
		c.subs = append(c.subs, s)
	}
	return nil
}

// reloadTenants reads the tenant authority's directory again as the
// coordinator starts to act: tenants added, changed or removed while
// another coordinator led are on disk only, and a new leader that did not
// read them would answer "no tenant". A directory that cannot be read now
// is read again until ctx ends; a corrupt file fails at once.
func (c *Coordinator) reloadTenants(ctx context.Context) error {
	for {
		err := c.cfg.Tenants.Reload()
		if err == nil {
			return nil
		}
		if errors.Is(err, tenant.ErrCorrupt) {
			return fmt.Errorf("coordinator: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coordinator: reading the tenant authority: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// visibleLocked reports whether who may see and act on job j.
func visibleLocked(j *jobState, who caller) bool {
	return who.admin() || j.info.Tenant == who.tenant
}

// auditEntry is one line of the audit log.
type auditEntry struct {
	Time   time.Time `json:"time"`
	Tenant string    `json:"tenant"`
	User   string    `json:"user,omitempty"`
	Action string    `json:"action"`
	Job    string    `json:"job,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// auditLog appends JSON lines to DATA/audit.log.
type auditLog struct {
	mu sync.Mutex
	f  *os.File
}

// AuditFile is where a coordinator with a data directory logs every
// control-plane request: who, what, on which job, and the outcome.
func AuditFile(dataDir string) string { return filepath.Join(dataDir, "audit.log") }

// audit records a request and its outcome.
func (c *Coordinator) audit(who caller, action, jobID string, err error) {
	if c.cfg.DataDir == "" {
		return
	}
	e := auditEntry{Time: time.Now().UTC(), Tenant: who.String(), User: who.user, Action: action, Job: jobID}
	if err != nil {
		e.Error = err.Error()
	}
	b, _ := json.Marshal(e)
	c.auditLog.mu.Lock()
	defer c.auditLog.mu.Unlock()
	if c.auditLog.f == nil {
		f, ferr := os.OpenFile(AuditFile(c.cfg.DataDir), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if ferr != nil {
			c.cfg.Log.Error("audit log", "err", ferr)
			return
		}
		c.auditLog.f = f
	}
	if _, werr := c.auditLog.f.Write(append(b, '\n')); werr != nil {
		c.cfg.Log.Error("audit log", "err", werr)
	}
}

// dataConn is the connection through which the coordinator reaches the
// data of tenant's jobs: its own for the admin's jobs (and on a cluster
// without tenants), else one as a user of the tenant's account.
func (c *Coordinator) dataConn(tenantName string) (*nats.Conn, error) {
	if tenantName == "" {
		return c.cfg.NATS, nil
	}
	c.tconnMu.Lock()
	defer c.tconnMu.Unlock()
	if nc, ok := c.tconns[tenantName]; ok && !nc.IsClosed() {
		return nc, nil
	}
	if c.cfg.Tenants == nil || c.cfg.TenantConnect == nil {
		return nil, fmt.Errorf("tenant %s: this coordinator has no tenants", tenantName)
	}
	cr, err := c.cfg.Tenants.TenantUser(tenantName, "wstream-coordinator")
	if err != nil {
		return nil, err
	}
	nc, err := c.cfg.TenantConnect("wstream-coordinator-"+tenantName, cr)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: connecting to its account: %w", tenantName, err)
	}
	c.tconns[tenantName] = nc
	return nc, nil
}

// jobConn is dataConn for a job.
func (c *Coordinator) jobConn(j *jobState) (*nats.Conn, error) { return c.dataConn(j.info.Tenant) }

// tenantRoot is the directory under which a tenant's jobs keep their
// checkpoints and savepoints when they use the data directory.
func (c *Coordinator) tenantRoot(name string) string {
	return filepath.Join(c.cfg.DataDir, "tenants", name)
}

// checkTenantPlan refuses what a tenant's plan may not do on a shared
// host: connectors that read or write the host's files or terminal, or
// name credential files, checkpoint storage outside the tenant's account,
// and sizes beyond its quotas.
func checkTenantPlan(plan *job.Plan, g *job.Graph, q tenant.Quotas) error {
	for _, ch := range g.Chains {
		if ch.Parallelism > q.Parallelism {
			return fmt.Errorf("vertex %q: parallelism %d is over the tenant's quota of %d", ch.Vertices[0].ID, ch.Parallelism, q.Parallelism)
		}
	}
	for _, v := range plan.Vertices {
		if v.Kind != job.KindSource && v.Kind != job.KindSink {
			continue
		}
		if err := checkTenantConnector(v.Kind, v.Connector, v.Config); err != nil {
			return fmt.Errorf("vertex %q: %w", v.ID, err)
		}
	}
	if ge := plan.OnGuestError; ge.DeadLetters() {
		// Dead letters go through a sink connector too, by default a file
		// on the worker's disk that no tenant quota counts.
		if ge.Sink == nil {
			return errors.New("onGuestError: a tenant job names its dead-letter sink: dead-letter:jetstream:stream=S,subject=T (the tenant's own streams) or dead-letter:discard")
		}
		if err := checkTenantConnector(job.KindSink, ge.Sink.Connector, ge.Sink.Config); err != nil {
			return fmt.Errorf("onGuestError: the dead-letter sink: %w", err)
		}
	}
	if plan.MaxParallelism > q.Parallelism*8 && plan.MaxParallelism > 128 {
		return fmt.Errorf("max parallelism %d is over the tenant's bound of %d", plan.MaxParallelism, max(128, q.Parallelism*8))
	}
	if plan.Checkpoint == nil {
		// nothing to check
	} else if s := plan.Checkpoint.Storage; s != "" && !checkpoint.IsObjectLocation(s) {
		return fmt.Errorf("checkpoint storage %s: a tenant job keeps its checkpoints in its own account (nats-obj://BUCKET) or in the server's data directory (leave it out)", s)
	}
	n := 0
	for _, ch := range g.Chains {
		n += ch.Parallelism
	}
	if n > q.Subtasks {
		return fmt.Errorf("the job has %d subtasks, over the tenant's quota of %d", n, q.Subtasks)
	}
	return nil
}

// checkTenantConnector refuses a connector a tenant's job may not use:
// one whose configuration reaches beyond the tenant's own account (the
// host's files or terminal, another NATS server, credentials or TLS
// files). It checks the configuration as the connector decodes it, the
// value the worker builds the connector from, not the JSON sent.
func checkTenantConnector(kind, name string, config json.RawMessage) error {
	var cfg connector.Config
	var err error
	if kind == job.KindSource {
		cfg, err = connector.DecodeSource(name, config)
	} else {
		cfg, err = connector.DecodeSink(name, config)
	}
	if err != nil {
		return err
	}
	for _, r := range cfg.Reach() {
		advice := "tenant jobs may not: use jetstream (the tenant's own streams), gen or discard"
		if name == "jetstream" {
			advice = "a tenant job's JetStream connectors use the tenant's own account: leave out url, credentials and TLS files"
		}
		if r.Field == "" {
			return fmt.Errorf("connector %s: reaches %s; %s", name, r.What, advice)
		}
		return fmt.Errorf("connector %s: config.%s: names %s; %s", name, r.Field, r.What, advice)
	}
	return nil
}

// Restart bounds of tenants' jobs: a job that fails at once on every
// attempt must not take a worker's cores (deploys, restores, guest
// starts) in a loop.
const (
	TenantMinRestartDelay = time.Second
	TenantMaxRestartDelay = 5 * time.Minute
)

// tenantRestart makes a tenant's restart strategy back off: a delay of at
// least TenantMinRestartDelay, and a strategy with unlimited attempts
// becomes an exponential backoff up to at least TenantMaxRestartDelay.
func tenantRestart(plan *job.Plan) {
	r := plan.Restart
	if r == nil || r.Strategy == "" || r.Strategy == job.RestartNone {
		return
	}
	if r.Delay < TenantMinRestartDelay.Milliseconds() {
		r.Delay = TenantMinRestartDelay.Milliseconds()
	}
	if r.Attempts == 0 {
		// Restarting for ever backs off to minutes, whatever the plan
		// says: its cap could otherwise equal its first delay.
		r.Strategy = job.RestartExponential
		r.MaxDelay = max(r.MaxDelay, r.Delay, TenantMaxRestartDelay.Milliseconds())
	}
	if r.Strategy == job.RestartExponential {
		if r.MaxDelay == 0 || r.MaxDelay < r.Delay {
			r.MaxDelay = max(r.Delay, TenantMaxRestartDelay.Milliseconds())
		}
		if r.Multiplier != 0 && r.Multiplier < 1.5 {
			r.Multiplier = 1.5
		}
	}
}

// checkTenantQuotasLocked checks that one more job of n subtasks fits the
// tenant's quotas of running jobs and subtasks.
func (c *Coordinator) checkTenantQuotasLocked(name string, q tenant.Quotas, n int) error {
	jobs, tasks := 0, 0
	for _, j := range c.jobs {
		if j.done || j.info.Tenant != name {
			continue
		}
		jobs++
		tasks += len(j.refs)
	}
	if jobs+1 > q.Jobs {
		return fmt.Errorf("tenant %s runs %d jobs, its quota", name, jobs)
	}
	if tasks+n > q.Subtasks {
		return fmt.Errorf("tenant %s's running jobs hold %d subtasks and this one needs %d: over its quota of %d", name, tasks, n, q.Subtasks)
	}
	return nil
}

// checkTenantLocation refuses savepoint locations a tenant may not use: a
// directory outside the tenant's part of the data directory.
func (c *Coordinator) checkTenantLocation(who caller, loc string) error {
	if who.admin() || loc == "" || checkpoint.IsObjectLocation(loc) {
		return nil
	}
	abs, err := filepath.Abs(loc)
	if err == nil {
		if within(c.tenantRoot(who.tenant), abs) {
			return nil
		}
		// The retained checkpoints of the tenant's own jobs.
		jobs := filepath.Join(c.cfg.DataDir, "jobs")
		if within(jobs, abs) {
			rel, _ := filepath.Rel(jobs, abs)
			id, _, _ := strings.Cut(rel, string(filepath.Separator))
			if rec, rerr := c.readRecord(id); rerr == nil && rec.Tenant == who.tenant {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: a tenant's savepoints live in its own account (nats-obj://BUCKET) or under the server's directory for it (%s)", loc, c.tenantRoot(who.tenant))
}

// within reports whether path p lies under dir (both absolute and clean).
func within(dir, p string) bool {
	dir, _ = filepath.Abs(dir)
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// jobOwner decides which tenant a submitted job belongs to: the caller's,
// or the one the admin names; with the tenant's quotas.
func (c *Coordinator) jobOwner(req transport.SubmitRequest, who caller) (string, tenant.Quotas, error) {
	owner := who.tenant
	if who.admin() {
		owner = req.Tenant
	} else if req.Tenant != "" && req.Tenant != who.tenant {
		return "", tenant.Quotas{}, fmt.Errorf("not authorized: tenant %s cannot submit jobs as %s", who.tenant, req.Tenant)
	}
	if owner == "" {
		return "", tenant.Quotas{}, nil
	}
	if c.cfg.Tenants == nil {
		return "", tenant.Quotas{}, errors.New("this cluster has no tenants")
	}
	t, ok := c.cfg.Tenants.Get(owner)
	if !ok || t.Removed {
		return "", tenant.Quotas{}, fmt.Errorf("no tenant %q", owner)
	}
	return owner, t.Quotas.WithDefaults(), nil
}

// publishToTenant publishes what tenant's clients receive on
// "wstream." + subject.
func (c *Coordinator) publishToTenant(name, subject string, data []byte) {
	if c.cfg.Tenants == nil {
		return
	}
	t, ok := c.cfg.Tenants.Get(name)
	if !ok {
		return
	}
	_ = c.cfg.NATS.Publish(tenant.EventsPrefix+t.Account+"."+subject, data)
}

// DefaultAttemptCredsTTL is how long a job attempt's credentials stay
// valid by default. NATS closes a connection whose credentials expire
// (its connections then reconnect with the renewed ones), so it is long;
// the credentials of an attempt are revoked as soon as it ends.
const DefaultAttemptCredsTTL = 7 * 24 * time.Hour

// mintedAttempts are the users minted for job attempts that are not
// revoked yet, by public key.
type mintedAttempts struct {
	mu   sync.Mutex
	keys map[string]mintedAttempt
	// renewed is when the running attempts' credentials were last renewed.
	renewed time.Time
}

type mintedAttempt struct {
	tenant, job string
	attempt     int
	expires     int64
	// ended is when the attempt was first seen ended.
	ended time.Time
}

// attemptRevokeGrace is how long an ended attempt keeps its credentials:
// its subtasks may still be cancelling (a sink aborting its transaction).
const attemptRevokeGrace = 10 * time.Second

// attemptUser mints (and remembers, to revoke) the credentials of an
// attempt.
func (c *Coordinator) attemptUser(tenantName, job string, attempt int) (tenant.Creds, error) {
	cr, err := c.cfg.Tenants.AttemptUser(tenantName, job, attempt, c.cfg.AttemptCredsTTL)
	if err != nil {
		return tenant.Creds{}, err
	}
	uc, err := jwt.DecodeUserClaims(cr.JWT)
	if err != nil {
		return tenant.Creds{}, err
	}
	c.minted.mu.Lock()
	if c.minted.keys == nil {
		c.minted.keys = map[string]mintedAttempt{}
	}
	c.minted.keys[uc.Subject] = mintedAttempt{tenant: tenantName, job: job, attempt: attempt, expires: uc.Expires}
	c.minted.mu.Unlock()
	return cr, nil
}

// tenantDeployment gives the workers of an attempt, on a cluster with
// tenants, the credentials of that attempt (a user of the job's account,
// the tenant's or, for the admin's jobs, the service account's, that
// expires, is revoked when the attempt ends, and may not use the control
// plane) and the quotas they enforce. The deployment goes to each worker
// on its own subject, which no other worker may read.
func (c *Coordinator) tenantDeployment(j *jobState, d *transport.Deployment) error {
	name := j.info.Tenant
	if c.cfg.Tenants == nil {
		if name == "" {
			return nil
		}
		return fmt.Errorf("job %s belongs to tenant %s and this coordinator has no tenants", j.info.JobID, name)
	}
	cr, err := c.attemptUser(name, j.info.JobID, d.Attempt)
	if err != nil {
		return fmt.Errorf("job %s: %w", j.info.JobID, err)
	}
	d.Tenant, d.TenantJWT, d.TenantSeed = name, cr.JWT, cr.Seed
	if name == "" {
		return nil
	}
	t, ok := c.cfg.Tenants.Get(name)
	if !ok || t.Removed {
		return fmt.Errorf("job %s: no tenant %q", j.info.JobID, name)
	}
	q := t.Quotas.WithDefaults()
	d.MemoryLimitMiB, d.StateBytes, d.StateWriteRate, d.Weight = q.MemoryMiB, q.StateBytes, q.StateWriteRate, q.Weight
	return nil
}

// renewAttemptCreds revokes, every second, the credentials of attempts
// that have ended, and sends, every third of AttemptCredsTTL, new
// credentials for each running attempt to each of its workers: an attempt
// outlives its first credentials, a stolen copy does not outlive the
// attempt.
func (c *Coordinator) renewAttemptCreds(quit <-chan struct{}) {
	defer c.monitor.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	c.minted.mu.Lock()
	c.minted.renewed = time.Now()
	c.minted.mu.Unlock()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		c.revokeEndedAttempts()
		c.minted.mu.Lock()
		due := time.Since(c.minted.renewed) >= c.cfg.AttemptCredsTTL/3
		if due {
			c.minted.renewed = time.Now()
		}
		c.minted.mu.Unlock()
		if due {
			c.renewRunningAttempts()
		}
	}
}

// revokeEndedAttempts revokes the users of attempts that no longer run.
func (c *Coordinator) revokeEndedAttempts() {
	live := map[string]int{}
	c.mu.Lock()
	for id, j := range c.jobs {
		if !j.done {
			live[id] = j.attempt
		}
	}
	c.mu.Unlock()
	type batch struct {
		keys    []string
		expires int64
	}
	ended := map[string]*batch{}
	now := time.Now()
	c.minted.mu.Lock()
	for k, m := range c.minted.keys {
		if a, ok := live[m.job]; ok && a == m.attempt {
			continue
		}
		if m.ended.IsZero() {
			m.ended = now
			c.minted.keys[k] = m
		}
		if now.Sub(m.ended) < attemptRevokeGrace {
			continue
		}
		b := ended[m.tenant]
		if b == nil {
			b = &batch{}
			ended[m.tenant] = b
		}
		b.keys = append(b.keys, k)
		b.expires = max(b.expires, m.expires)
	}
	c.minted.mu.Unlock()
	for name, b := range ended {
		j, err := c.cfg.Tenants.RevokeAttemptUsers(name, b.keys, b.expires)
		if err == nil && c.cfg.SystemConn != nil {
			err = tenant.Push(c.cfg.SystemConn, j)
		}
		if err != nil {
			// Tried again at the next tick.
			c.cfg.Log.Warn("revoking ended attempts' credentials", logging.Tenant, orString(name, tenant.Admin), "err", err)
			continue
		}
		c.minted.mu.Lock()
		for _, k := range b.keys {
			delete(c.minted.keys, k)
		}
		c.minted.mu.Unlock()
	}
}

// renewRunningAttempts sends each worker of each running attempt new
// credentials of it.
func (c *Coordinator) renewRunningAttempts() {
	type send struct {
		worker, tenant, job string
		attempt             int
	}
	var out []send
	c.mu.Lock()
	for _, j := range c.jobs {
		if j.done {
			continue
		}
		for w := range j.placement {
			out = append(out, send{w, j.info.Tenant, j.info.JobID, j.attempt})
		}
	}
	c.mu.Unlock()
	for _, s := range out {
		c.sendCreds(s.worker, s.tenant, s.job, s.attempt)
	}
}

// sendCreds sends worker new credentials of attempt of job. Like a
// command it carries the leader's epoch, and a leader that no longer holds
// its lease mints none: a key it minted the next leader would not know to
// revoke.
func (c *Coordinator) sendCreds(worker, tenantName, job string, attempt int) {
	epoch, err := c.fence()
	if err != nil {
		return
	}
	cr, err := c.attemptUser(tenantName, job, attempt)
	if err != nil {
		c.cfg.Log.Warn("renewing a job attempt's credentials", logging.Job, job, "err", err)
		return
	}
	b, _ := json.Marshal(transport.CredsRenewal{JobID: job, Attempt: attempt, JWT: cr.JWT, Seed: cr.Seed, Epoch: epoch})
	_ = c.cfg.NATS.Publish(transport.WorkerCredsSubject(worker), b)
}

// statusFromWorker makes h take a task status only from the subject of the
// worker it names (transport.TaskStatusSubject).
func statusFromWorker(h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		var st transport.TaskStatus
		i := strings.LastIndexByte(m.Subject, '.')
		if json.Unmarshal(m.Data, &st) == nil && st.Worker != m.Subject[i+1:] {
			return
		}
		h(m)
	}
}

// workerSubject makes h take a worker's registration or heartbeat only
// from the subject of the worker it names (transport.WorkerRegisterSubject):
// a worker's credentials may publish under its own id only, so one
// worker cannot speak for another.
func workerSubject(h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		var w transport.WorkerInfo
		_, id, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(m.Subject, transport.SubjectRegister), transport.SubjectHeartbeat), ".")
		if json.Unmarshal(m.Data, &w) == nil && w.ID != id {
			if m.Reply != "" {
				respond(m, transport.Reply{Error: fmt.Sprintf("not authorized: worker %s cannot speak for worker %s", id, w.ID)})
			}
			return
		}
		h(m)
	}
}

func orString(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// onTenant manages tenants; only the admin may.
func (c *Coordinator) onTenant(m *nats.Msg, who caller) {
	var req transport.TenantRequest
	err := json.Unmarshal(m.Data, &req)
	var reply transport.TenantReply
	switch {
	case err != nil:
		err = fmt.Errorf("bad tenant request: %w", err)
	case !who.admin():
		err = errors.New("not authorized: only the admin manages tenants")
	case c.cfg.Tenants == nil:
		err = errors.New("this cluster has no tenants: start `wstream server --tenants`")
	default:
		reply, err = c.tenantOp(req)
	}
	c.audit(who, "tenant "+string(req.Op)+" "+req.Name, "", err)
	if err != nil {
		reply = transport.TenantReply{Error: err.Error()}
	}
	respond(m, reply)
}

func (c *Coordinator) tenantOp(req transport.TenantRequest) (transport.TenantReply, error) {
	if _, err := transport.ParseTenantOp(string(req.Op)); err != nil {
		return transport.TenantReply{}, err
	}
	var q tenant.Quotas
	if len(req.Quotas) > 0 {
		if err := json.Unmarshal(req.Quotas, &q); err != nil {
			return transport.TenantReply{}, fmt.Errorf("bad quotas: %w", err)
		}
	}
	a := c.cfg.Tenants
	switch req.Op {
	case transport.TenantList:
		var out transport.TenantReply
		for _, t := range a.Tenants() {
			b, _ := json.Marshal(t)
			out.Tenants = append(out.Tenants, b)
		}
		return out, nil
	case transport.TenantAdd, transport.TenantUpdate, transport.TenantRemove, transport.TenantCreds:
		return c.tenantChange(req, q)
	case transport.TenantWorkerRevoke:
		j, err := a.RevokeWorker(req.Name)
		if err != nil {
			return transport.TenantReply{}, err
		}
		if c.cfg.SystemConn == nil {
			return transport.TenantReply{}, errors.New("no system account connection to push the service account to NATS")
		}
		if err := tenant.Push(c.cfg.SystemConn, j); err != nil {
			return transport.TenantReply{}, err
		}
		return transport.TenantReply{}, nil
	case transport.TenantWorkerCreds:
		// A worker's own user: it acts as the worker called req.Name.
		cr, err := a.WorkerUser(req.Name)
		if err != nil {
			return transport.TenantReply{}, err
		}
		f, err := cr.File()
		if err != nil {
			return transport.TenantReply{}, err
		}
		return transport.TenantReply{Creds: string(f)}, nil
	}
	// ParseTenantOp above admits only the operations handled here.
	return transport.TenantReply{}, fmt.Errorf("tenant operation %q not handled", req.Op)
}

// tenantChange adds, updates or removes a tenant, or gives it new
// credentials: the account's new JWT reaches NATS before the reply, and
// the reply of an add or new credentials carries them with a new REST
// API token (the old one stops working).
func (c *Coordinator) tenantChange(req transport.TenantRequest, q tenant.Quotas) (transport.TenantReply, error) {
	a := c.cfg.Tenants
	var (
		t   tenant.Tenant
		jwt string
		err error
	)
	switch req.Op {
	case transport.TenantAdd:
		t, jwt, err = a.Add(req.Name, q)
	case transport.TenantUpdate:
		t, jwt, err = a.Update(req.Name, q)
	case transport.TenantRemove:
		if err = c.tenantIdle(req.Name); err == nil {
			t, jwt, err = a.Remove(req.Name)
		}
	case transport.TenantCreds:
		t, _ = a.Get(req.Name)
	}
	if err != nil {
		return transport.TenantReply{}, err
	}
	if jwt != "" {
		if c.cfg.SystemConn == nil {
			return transport.TenantReply{}, errors.New("no system account connection to push the tenant's account to NATS")
		}
		if err := tenant.Push(c.cfg.SystemConn, jwt); err != nil {
			return transport.TenantReply{}, err
		}
	}
	if req.Op == transport.TenantRemove {
		if err := a.RevokeAPIToken(req.Name); err != nil {
			return transport.TenantReply{}, err
		}
		c.tconnMu.Lock()
		if nc := c.tconns[req.Name]; nc != nil {
			nc.Close()
			delete(c.tconns, req.Name)
		}
		c.tconnMu.Unlock()
	}
	b, _ := json.Marshal(t)
	out := transport.TenantReply{Tenants: []json.RawMessage{b}}
	if req.Op == transport.TenantAdd || req.Op == transport.TenantCreds {
		cr, err := a.TenantUser(req.Name, req.Name+"-client")
		if err != nil {
			return transport.TenantReply{}, err
		}
		f, err := cr.File()
		if err != nil {
			return transport.TenantReply{}, err
		}
		out.Creds = string(f)
		if out.APIToken, err = a.IssueAPIToken(req.Name); err != nil {
			return transport.TenantReply{}, err
		}
	}
	return out, nil
}

// tenantIdle refuses to remove a tenant that still runs a job.
func (c *Coordinator) tenantIdle(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range c.jobs {
		if !j.done && j.info.Tenant == name {
			return fmt.Errorf("tenant %s still runs job %s: cancel its jobs first", name, j.info.JobID)
		}
	}
	return nil
}

// tenantModule makes sure the module of a tenant's job is in the tenant's
// own module store, where its workers fetch it: a tenant must have stored
// it (it cannot run another tenant's module by naming its digest), within
// its module size limit, and its bytes must hash to the digest (a name
// proves nothing: a tenant may store anything under any name). A job the
// admin submits for a tenant brings its module from the admin's store.
func (c *Coordinator) tenantModule(ctx context.Context, owner string, who caller, digest string, tnc *nats.Conn) error {
	if digest == "" {
		return nil
	}
	limit := c.moduleLimit(owner)
	if owner == "" {
		return c.adminModuleSize(ctx, digest, limit)
	}
	tjs, err := jetstream.New(tnc)
	if err != nil {
		return err
	}
	// The tenant's client made the store, with one copy; a tenant that
	// stored nothing gets none.
	if err := replicateModules(ctx, tjs, c.replicas(), false); err != nil {
		return fmt.Errorf("tenant %s: %w", owner, err)
	}
	obs, err := tjs.ObjectStore(ctx, transport.ModuleBucket)
	switch {
	case err == nil:
		err = verifyModule(ctx, tjs, obs, owner, digest, limit)
	case errors.Is(err, jetstream.ErrBucketNotFound):
		err = jetstream.ErrObjectNotFound
	default:
		return fmt.Errorf("opening tenant %s's module store: %w", owner, err)
	}
	if err == nil {
		return nil
	}
	missing := errors.Is(err, jetstream.ErrObjectNotFound)
	if !who.admin() {
		if missing {
			return fmt.Errorf("module %s is not in tenant %s's module store: store it with the tenant's credentials (wstream deploy does)", digest, owner)
		}
		return err
	}
	// The admin's module replaces other bytes under its name, and a copy
	// whose put was cut short.
	if !missing && !errors.Is(err, transport.ErrModuleDigest) && !errors.Is(err, transport.ErrModuleIncomplete) {
		return err
	}
	js, err := jetstream.New(c.cfg.NATS)
	if err != nil {
		return err
	}
	aobs, err := js.ObjectStore(ctx, transport.ModuleBucket)
	if err != nil {
		return fmt.Errorf("opening module store %s: %w", transport.ModuleBucket, err)
	}
	wasm, err := transport.FetchModule(ctx, js, aobs, "", digest, limit)
	if err != nil {
		return err
	}
	if _, err := StoreModule(ctx, tnc, wasm); err != nil {
		return fmt.Errorf("tenant %s: %w", owner, err)
	}
	if err := replicateModules(ctx, tjs, c.replicas(), false); err != nil {
		return fmt.Errorf("tenant %s: %w", owner, err)
	}
	if obs, err = tjs.ObjectStore(ctx, transport.ModuleBucket); err != nil {
		return fmt.Errorf("opening tenant %s's module store: %w", owner, err)
	}
	return verifyModule(ctx, tjs, obs, owner, digest, limit)
}
