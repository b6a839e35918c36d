package tenant

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/wstream/wstream/transport"
)

// Subjects that cross accounts (see the package documentation).
const (
	// APIPrefix + ACCOUNT + "." + verb is where a tenant's control-plane
	// request reaches the coordinator.
	APIPrefix = "wstream.api."
	// EventsPrefix + ACCOUNT + "." + subject is where the coordinator
	// publishes what a tenant's clients hear as "wstream." + subject.
	EventsPrefix = "wstream.events."
)

// Tenant is one tenant: its NATS account and quotas.
type Tenant struct {
	Name    string    `json:"name"`
	Account string    `json:"account"` // the account's public key
	Quotas  Quotas    `json:"quotas"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Removed tenants keep their record (so that their id is not reused
	// while their jobs' data remain) but their users are revoked.
	Removed bool `json:"removed,omitempty"`
}

// record is a tenant as stored: with the account's seed.
type record struct {
	Tenant
	Seed string `json:"seed"`
	// Revoked are users of the account revoked (public key → until when
	// the revocation must stay: their expiry).
	Revoked map[string]int64 `json:"revoked,omitempty"`
}

// Creds are a user's JWT and nkey seed.
type Creds struct {
	JWT  string `json:"jwt"`
	Seed string `json:"seed"`
}

// File is the credentials file (as nsc writes it).
func (c Creds) File() ([]byte, error) {
	return jwt.FormatUserConfig(c.JWT, []byte(c.Seed))
}

// Option authenticates a NATS connection with c.
func (c Creds) Option() nats.Option { return nats.UserJWTAndSeed(c.JWT, c.Seed) }

// Authority holds the operator's, the system and service accounts' and
// every tenant's keys. It is safe for concurrent use.
type Authority struct {
	dir                       string
	operator, system, service nkeys.KeyPair
	operatorJWT               string
	systemJWT, serviceJWT     string

	mu      sync.Mutex
	tenants map[string]*record
	// revoked are the service account's users revoked, kept in
	// revoked.json and signed into the account's JWT.
	revoked serviceRevocations
}

// serviceRevocations are the service account's revoked users by public
// key: Users (workers, older servers' users) for ever, from when they
// were revoked; Attempts until they expire.
type serviceRevocations struct {
	Users    map[string]int64 `json:"users"`
	Attempts map[string]int64 `json:"attempts"`
}

// Open opens the authority in dir, creating its keys when dir holds none.
func Open(dir string) (*Authority, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tenants"), 0o700); err != nil {
		return nil, fmt.Errorf("tenant authority %s: %w", dir, err)
	}
	a := &Authority{dir: dir, tenants: map[string]*record{}}
	var err error
	if a.operator, err = loadOrCreate(dir, "operator.seed", nkeys.CreateOperator); err != nil {
		return nil, err
	}
	if a.system, err = loadOrCreate(dir, "system.seed", nkeys.CreateAccount); err != nil {
		return nil, err
	}
	if a.service, err = loadOrCreate(dir, "service.seed", nkeys.CreateAccount); err != nil {
		return nil, err
	}
	if a.revoked, err = readRevoked(dir); err != nil {
		return nil, err
	}
	if err := a.sign(); err != nil {
		return nil, err
	}
	if a.tenants, err = readTenants(dir); err != nil {
		return nil, err
	}
	return a, nil
}

// ErrCorrupt marks an authority file that was read but does not hold what
// it should: reading it again will not help. Other errors of Open and
// Reload are I/O errors that may pass.
var ErrCorrupt = errors.New("tenant authority: corrupt file")

// Reload reads the tenants and the service account's revocations from the
// directory again: another holder of the directory (the coordinator that
// led before this one) may have added, changed or removed tenants. On an
// error the authority keeps what it held; errors.Is(err, ErrCorrupt) tells
// a file that will not read from one that cannot be read now.
func (a *Authority) Reload() error {
	revoked, err := readRevoked(a.dir)
	if err != nil {
		return err
	}
	tenants, err := readTenants(a.dir)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.revoked
	a.revoked = revoked
	if err := a.sign(); err != nil {
		a.revoked = old
		return err
	}
	a.tenants = tenants
	return nil
}

// readRevoked reads the service account's revocations.
func readRevoked(dir string) (serviceRevocations, error) {
	r := serviceRevocations{Users: map[string]int64{}, Attempts: map[string]int64{}}
	p := filepath.Join(dir, revokedFile)
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return r, nil
	case err != nil:
		return r, fmt.Errorf("tenant authority: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	if r.Users == nil {
		r.Users = map[string]int64{}
	}
	if r.Attempts == nil {
		r.Attempts = map[string]int64{}
	}
	return r, nil
}

// readTenants reads every tenant's record.
func readTenants(dir string) (map[string]*record, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "tenants"))
	if err != nil {
		return nil, fmt.Errorf("tenant authority %s: %w", dir, err)
	}
	tenants := map[string]*record{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, "tenants", e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("tenant authority: %w", err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
		}
		if err := CheckName(r.Name); err != nil || r.Name+".json" != e.Name() {
			return nil, fmt.Errorf("%w: %s does not hold tenant %q", ErrCorrupt, p, r.Name)
		}
		tenants[r.Name] = &r
	}
	return tenants, nil
}

// loadOrCreate reads the seed in dir/name, or creates a key and writes its
// seed there.
func loadOrCreate(dir, name string, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return nil, fmt.Errorf("tenant authority: %s: %w", p, err)
		}
		return kp, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("tenant authority: %w", err)
	}
	kp, err := create()
	if err != nil {
		return nil, err
	}
	seed, _ := kp.Seed()
	if err := writePrivate(p, append(seed, '\n')); err != nil {
		return nil, err
	}
	return kp, nil
}

// writePrivate writes a file only its owner may read, atomically.
func writePrivate(p string, b []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("tenant authority: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("tenant authority: %w", err)
	}
	return nil
}

func pub(kp nkeys.KeyPair) string {
	p, _ := kp.PublicKey()
	return p
}

// sign issues the operator's, the system account's and the service
// account's JWTs.
func (a *Authority) sign() error {
	oc := jwt.NewOperatorClaims(pub(a.operator))
	oc.Name = "wstream"
	oc.SystemAccount = pub(a.system)
	var err error
	if a.operatorJWT, err = oc.Encode(a.operator); err != nil {
		return fmt.Errorf("tenant authority: operator JWT: %w", err)
	}
	sc := jwt.NewAccountClaims(pub(a.system))
	sc.Name = "SYS"
	if a.systemJWT, err = sc.Encode(a.operator); err != nil {
		return fmt.Errorf("tenant authority: system account JWT: %w", err)
	}
	vc := jwt.NewAccountClaims(pub(a.service))
	vc.Name = "wstream"
	vc.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	for k, at := range a.revoked.Users {
		vc.RevokeAt(k, time.Unix(at, 0))
	}
	now := time.Now().Unix()
	for k, until := range a.revoked.Attempts {
		if until > now {
			vc.Revoke(k)
		}
	}
	// The importer's account key at token 3: an account can import only
	// its own part of each subject space.
	vc.Exports.Add(
		&jwt.Export{Name: "wstream api", Subject: jwt.Subject(APIPrefix + "*.>"), Type: jwt.Service, AccountTokenPosition: 3},
		&jwt.Export{Name: "wstream events", Subject: jwt.Subject(EventsPrefix + "*.>"), Type: jwt.Stream, AccountTokenPosition: 3},
	)
	if a.serviceJWT, err = vc.Encode(a.operator); err != nil {
		return fmt.Errorf("tenant authority: service account JWT: %w", err)
	}
	return nil
}

// Dir is the authority's directory.
func (a *Authority) Dir() string { return a.dir }

// ServiceAccount is the public key of the account of the coordinator,
// the workers and the admin.
func (a *Authority) ServiceAccount() string { return pub(a.service) }

// SystemAccount is the public key of the NATS system account.
func (a *Authority) SystemAccount() string { return pub(a.system) }

// accountJWT signs a tenant's account JWT.
func (a *Authority) accountJWT(r *record) (string, error) {
	kp, err := nkeys.FromSeed([]byte(r.Seed))
	if err != nil {
		return "", fmt.Errorf("tenant %s: account key: %w", r.Name, err)
	}
	ac := jwt.NewAccountClaims(pub(kp))
	ac.Name = r.Name
	q := r.Quotas.WithDefaults()
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: q.MemoryStorageBytes, DiskStorage: q.StorageBytes, Streams: q.Streams, Consumer: -1}
	acct := r.Account
	ac.Imports.Add(
		&jwt.Import{Name: "wstream api", Account: pub(a.service), Subject: jwt.Subject(APIPrefix + acct + ".>"),
			LocalSubject: "wstream.coord.>", Type: jwt.Service, Share: true},
		&jwt.Import{Name: "wstream events", Account: pub(a.service), Subject: jwt.Subject(EventsPrefix + acct + ".>"),
			LocalSubject: "wstream.>", Type: jwt.Stream},
	)
	now := time.Now().Unix()
	for k, until := range r.Revoked {
		if until > now {
			ac.Revoke(k)
		}
	}
	if r.Removed {
		// Every user issued so far is revoked, and JetStream is off.
		ac.Revoke(jwt.All)
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{}
	}
	return ac.Encode(a.operator)
}

// ConfigureServer makes an embedded NATS server trust the authority's
// operator, with the system account and an account resolver in the
// authority's directory that holds every account's JWT.
func (a *Authority) ConfigureServer(o *server.Options) error {
	oc, err := jwt.DecodeOperatorClaims(a.operatorJWT)
	if err != nil {
		return err
	}
	r, err := server.NewDirAccResolver(filepath.Join(a.dir, "jwt"), 0, time.Minute, server.RenameDeleted)
	if err != nil {
		return fmt.Errorf("tenant authority: account resolver: %w", err)
	}
	for acc, j := range a.jwts() {
		if err := r.Store(acc, j); err != nil {
			return fmt.Errorf("tenant authority: storing account %s: %w", acc, err)
		}
	}
	o.TrustedOperators = []*jwt.OperatorClaims{oc}
	o.SystemAccount = pub(a.system)
	o.AccountResolver = r
	return nil
}

// jwts are the JWTs of every account, by public key.
func (a *Authority) jwts() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]string{pub(a.system): a.systemJWT, pub(a.service): a.serviceJWT}
	for _, r := range a.tenants {
		if j, err := a.accountJWT(r); err == nil {
			out[r.Account] = j
		}
	}
	return out
}

// ServerConfig is a nats-server configuration fragment that makes an
// external server trust the authority: include it in the server's
// configuration (it names a resolver directory, jwtDir, which the server
// creates).
func (a *Authority) ServerConfig(jwtDir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# wstream tenants: written by `wstream tenant init`\n")
	fmt.Fprintf(&b, "operator: %s\n", a.operatorJWT)
	fmt.Fprintf(&b, "system_account: %s\n", pub(a.system))
	fmt.Fprintf(&b, "resolver: {\n  type: full\n  dir: %q\n  allow_delete: false\n  interval: \"2m\"\n}\n", jwtDir)
	fmt.Fprintf(&b, "resolver_preload: {\n")
	js := a.jwts()
	keys := make([]string, 0, len(js))
	for k := range js {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", k, js[k])
	}
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

// user mints a user of the account whose key is acct, with perms (nil:
// the account's whole reach), expiring after ttl (0: never), tagged tag.
func user(acct nkeys.KeyPair, name string, perms *jwt.Permissions, ttl time.Duration, tag string) (Creds, error) {
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return Creds{}, err
	}
	uc := jwt.NewUserClaims(pub(ukp))
	uc.Name = name
	if perms != nil {
		uc.Permissions = *perms
	}
	if ttl > 0 {
		uc.Expires = time.Now().Add(ttl).Unix()
	}
	if tag != "" {
		uc.Tags.Add(tag)
	}
	j, err := uc.Encode(acct)
	if err != nil {
		return Creds{}, err
	}
	seed, _ := ukp.Seed()
	return Creds{JWT: j, Seed: string(seed)}, nil
}

// Tags of the service account's users: what each may do is in its
// permissions; the tag names the role.
const (
	TagAdmin       = "wstream-admin"
	TagCoordinator = "wstream-coordinator"
	TagWorker      = "wstream-worker"
	// TagAttempt marks the credentials of one job attempt.
	TagAttempt = "wstream-attempt"
)

// AdminUser mints a user of the service account for the admin: it may do
// everything the service account can (manage tenants, act on every job).
func (a *Authority) AdminUser(name string) (Creds, error) {
	return user(a.service, name, nil, 0, TagAdmin)
}

// CoordinatorUser mints the coordinator's user of the service account.
// The coordinator holds the authority itself, so its user is not
// narrowed.
func (a *Authority) CoordinatorUser(name string) (Creds, error) {
	return user(a.service, name, nil, 0, TagCoordinator)
}

// WorkerUser mints the user of the worker whose id is name: it may
// register and heartbeat as that worker, report its subtasks' status,
// checkpoint acknowledgements and metrics, and hear what the coordinator
// sends that worker (transport.WorkerSubjects), with its inbox there too.
// It may not publish any other control-plane request (submit, cancel,
// tenant, …), nor subscribe to another worker's subjects or to the
// account's inboxes, nor use JetStream: a job's data is reached through
// the credentials each attempt brings (AttemptUser).
func (a *Authority) WorkerUser(name string) (Creds, error) {
	if err := CheckWorkerName(name); err != nil {
		return Creds{}, err
	}
	cr, err := user(a.service, name, WorkerPermissions(name), 0, TagWorker)
	if err != nil {
		return Creds{}, err
	}
	uc, err := jwt.DecodeUserClaims(cr.JWT)
	if err != nil {
		return Creds{}, err
	}
	// Kept, so that RevokeWorker can revoke every user of the worker.
	a.mu.Lock()
	defer a.mu.Unlock()
	workers, err := a.readWorkers()
	if err != nil {
		return Creds{}, err
	}
	workers[name] = append(workers[name], uc.Subject)
	if err := a.writeJSON(workersFile, workers); err != nil {
		return Creds{}, err
	}
	return cr, nil
}

// workersFile keeps the public keys of the users minted for each worker.
const workersFile = "workers.json"

func (a *Authority) readWorkers() (map[string][]string, error) {
	workers := map[string][]string{}
	b, err := os.ReadFile(filepath.Join(a.dir, workersFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return workers, nil
	case err != nil:
		return nil, fmt.Errorf("tenant authority: %w", err)
	}
	if err := json.Unmarshal(b, &workers); err != nil {
		return nil, fmt.Errorf("tenant authority: %s: %w", filepath.Join(a.dir, workersFile), err)
	}
	return workers, nil
}

func (a *Authority) writeJSON(name string, v any) error {
	b, _ := json.MarshalIndent(v, "", "  ")
	return writePrivate(filepath.Join(a.dir, name), append(b, '\n'))
}

// RevokeWorker revokes every user minted for worker name, and returns the
// service account's JWT that says so, which must reach the NATS servers
// (Push): the server then closes their connections.
func (a *Authority) RevokeWorker(name string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	workers, err := a.readWorkers()
	if err != nil {
		return "", err
	}
	if len(workers[name]) == 0 {
		return "", fmt.Errorf("no worker %q was given credentials", name)
	}
	for _, k := range workers[name] {
		if err := a.revokeLocked(k); err != nil {
			return "", err
		}
	}
	delete(workers, name)
	if err := a.writeJSON(workersFile, workers); err != nil {
		return "", err
	}
	return a.serviceJWT, nil
}

var workerNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckWorkerName checks a worker's id, which is a subject token.
func CheckWorkerName(name string) error {
	if !workerNameRE.MatchString(name) {
		return fmt.Errorf("worker name %q: use 1–64 characters A-Z, a-z, 0-9, '_' and '-'", name)
	}
	return nil
}

// WorkerPermissions are the permissions of worker name's user.
func WorkerPermissions(name string) *jwt.Permissions {
	p := &jwt.Permissions{}
	p.Pub.Allow.Add(
		transport.WorkerRegisterSubject(name),
		transport.WorkerHeartbeatSubject(name),
		transport.SubjectMetrics,
		transport.TaskStatusSubject("*", name),
		transport.CheckpointAckSubject("*"),
	)
	// Its own subjects, and the epochs leaders announce.
	p.Sub.Allow.Add(transport.WorkerSubjects(name), transport.SubjectLeader)
	// The answers to the coordinator's deploy, cancel and checkpoint
	// requests.
	p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: 10 * time.Minute}
	return p
}

// WorkerName returns the worker id in a worker's user JWT (minted by
// WorkerUser), and false for any other JWT.
func WorkerName(userJWT string) (string, bool) {
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil || !uc.Tags.Contains(TagWorker) || CheckWorkerName(uc.Name) != nil {
		return "", false
	}
	return uc.Name, true
}

// attemptDeny are the subjects a job attempt's credentials may neither
// publish nor subscribe to: the control plane (a tenant's imports of it
// too), the account's inboxes and, in the service account, the
// coordinator's buckets.
var attemptDeny = []string{
	"wstream.coord.>", "wstream.worker.>", "wstream.job.>", "wstream.api.>", "wstream.events.>", "_INBOX.>", "$SYS.>",
	// The leader's announcements: a forged epoch would make workers
	// refuse the real leader's commands.
	transport.SubjectLeader,
}

// coordinatorBuckets are the streams of the coordinator's key-value
// buckets (transport.JobsBucket, transport.CheckpointIDsBucket, and the
// coordinators' lease, coordinator.LeaderBucket).
var coordinatorBuckets = []string{"wstream_jobs", "wstream_checkpoint_ids", "wstream_leader"}

// AttemptPermissions are the permissions of the credentials of attempt
// of job: its subjects and streams, no control plane. Its connections use
// transport.AttemptInboxPrefix.
func AttemptPermissions(job string, attempt int) *jwt.Permissions {
	p := &jwt.Permissions{}
	p.Pub.Deny.Add(attemptDeny...)
	p.Sub.Deny.Add(attemptDeny...)
	for _, b := range coordinatorBuckets {
		st := "KV_" + b
		p.Pub.Deny.Add("$KV."+b+".>", "$JS.API.*.*."+st, "$JS.API.*.*."+st+".>", "$JS.API.*.*.*."+st, "$JS.API.*.*.*."+st+".>")
		p.Sub.Deny.Add("$KV." + b + ".>")
	}
	return p
}

// AttemptUser mints the credentials of one attempt of a job of tenant
// ("" is the admin: a user of the service account), valid for ttl: the
// worker that runs the attempt reaches the job's data through them.
func (a *Authority) AttemptUser(tenantName, job string, attempt int, ttl time.Duration) (Creds, error) {
	acct := a.service
	if tenantName != "" {
		kp, err := a.tenantKey(tenantName)
		if err != nil {
			return Creds{}, err
		}
		acct = kp
	}
	return user(acct, attemptName(job, attempt), AttemptPermissions(job, attempt), ttl, TagAttempt)
}

// attemptName is the user name AttemptUser gives the credentials of
// attempt of job.
func attemptName(job string, attempt int) string {
	return fmt.Sprintf("wstream-job-%s-%d", job, attempt)
}

// ErrAttemptUserExpired says that attempt credentials are past their
// expiry: nothing can use them any more.
var ErrAttemptUserExpired = errors.New("tenant: the attempt's credentials have expired")

// AttemptUserKey checks that userJWT is credentials AttemptUser minted for
// attempt of job of tenant ("" the admin: the service account), as a new
// leader that adopts the attempt learns them from the workers that hold
// them, and returns the user's public key and expiry (to revoke it when
// the attempt ends). The JWT's signature, its issuer (the account the
// authority keeps for tenantName, never one the JWT names for itself),
// its tag and its name must all be the attempt's; an expired one is
// ErrAttemptUserExpired.
func (a *Authority) AttemptUserKey(tenantName, job string, attempt int, userJWT string) (string, int64, error) {
	acct := pub(a.service)
	if tenantName != "" {
		t, ok := a.Get(tenantName)
		if !ok || t.Removed {
			return "", 0, fmt.Errorf("no tenant %q", tenantName)
		}
		acct = t.Account
	}
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil {
		return "", 0, fmt.Errorf("attempt credentials: %w", err)
	}
	switch {
	case uc.Issuer != acct || (uc.IssuerAccount != "" && uc.IssuerAccount != acct):
		return "", 0, fmt.Errorf("attempt credentials of account %s, not of the job's account %s", uc.Issuer, acct)
	case !uc.Tags.Contains(TagAttempt) || uc.Name != attemptName(job, attempt):
		return "", 0, fmt.Errorf("credentials %q are not those of attempt %d of job %s", uc.Name, attempt, job)
	case uc.Expires == 0:
		// AttemptUser always sets an expiry.
		return "", 0, fmt.Errorf("attempt credentials %q without an expiry", uc.Name)
	case uc.Expires <= time.Now().Unix():
		return "", 0, ErrAttemptUserExpired
	}
	return uc.Subject, uc.Expires, nil
}

// RevokeAttemptUsers revokes users that AttemptUser minted for tenant
// ("" the service account), by public key, valid until expires (Unix
// seconds; a revocation is dropped once the user has expired anyway). It
// returns the account's JWT that says so, to Push.
func (a *Authority) RevokeAttemptUsers(tenantName string, keys []string, expires int64) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now().Unix()
	if tenantName == "" {
		for k, until := range a.revoked.Attempts {
			if until <= now {
				delete(a.revoked.Attempts, k)
			}
		}
		for _, k := range keys {
			a.revoked.Attempts[k] = expires
		}
		if err := a.writeJSON(revokedFile, a.revoked); err != nil {
			return "", err
		}
		if err := a.sign(); err != nil {
			return "", err
		}
		return a.serviceJWT, nil
	}
	r, ok := a.tenants[tenantName]
	if !ok {
		return "", fmt.Errorf("no tenant %q", tenantName)
	}
	n := *r
	n.Revoked = map[string]int64{}
	for k, until := range r.Revoked {
		if until > now {
			n.Revoked[k] = until
		}
	}
	for _, k := range keys {
		n.Revoked[k] = expires
	}
	j, err := a.accountJWT(&n)
	if err != nil {
		return "", err
	}
	if err := a.save(&n); err != nil {
		return "", err
	}
	a.tenants[tenantName] = &n
	return j, nil
}

// RevokeServiceUser revokes a user of the service account (by its public
// key): the account JWT that says so must reach the NATS servers (the
// embedded server's resolver when it starts, or PushAll).
func (a *Authority) RevokeServiceUser(userKey string) error {
	if !nkeys.IsValidPublicUserKey(userKey) {
		return fmt.Errorf("revoking %q: not a user's public key", userKey)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.revokeLocked(userKey)
}

func (a *Authority) revokeLocked(userKey string) error {
	a.revoked.Users[userKey] = time.Now().Add(time.Second).Unix()
	if err := a.writeJSON(revokedFile, a.revoked); err != nil {
		return err
	}
	return a.sign()
}

// revokedFile keeps the service account's revoked users.
const revokedFile = "revoked.json"

// SystemUser mints a user of the system account (it pushes account JWTs).
func (a *Authority) SystemUser(name string) (Creds, error) { return user(a.system, name, nil, 0, "") }

// TenantUser mints a user of tenant's account: what its clients use, and
// what the coordinator and workers use to reach the tenant's data.
func (a *Authority) TenantUser(tenant, name string) (Creds, error) {
	kp, err := a.tenantKey(tenant)
	if err != nil {
		return Creds{}, err
	}
	return user(kp, name, nil, 0, "")
}

// tenantKey is the account key of a tenant that has not been removed.
func (a *Authority) tenantKey(name string) (nkeys.KeyPair, error) {
	a.mu.Lock()
	r, ok := a.tenants[name]
	a.mu.Unlock()
	if !ok || r.Removed {
		return nil, fmt.Errorf("no tenant %q", name)
	}
	return nkeys.FromSeed([]byte(r.Seed))
}

// Add creates a tenant (an account) with quotas q and returns it with its
// account JWT, which must reach the NATS servers (Push) before its users
// can connect.
func (a *Authority) Add(name string, q Quotas) (Tenant, string, error) {
	if err := CheckName(name); err != nil {
		return Tenant{}, "", err
	}
	if err := q.Check(); err != nil {
		return Tenant{}, "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.tenants[name]; ok {
		if r.Removed {
			return Tenant{}, "", fmt.Errorf("tenant %q was removed; choose another name", name)
		}
		return Tenant{}, "", fmt.Errorf("tenant %q exists", name)
	}
	kp, err := nkeys.CreateAccount()
	if err != nil {
		return Tenant{}, "", err
	}
	seed, _ := kp.Seed()
	now := time.Now().UTC()
	r := &record{Tenant: Tenant{Name: name, Account: pub(kp), Quotas: q.WithDefaults(), Created: now, Updated: now}, Seed: string(seed)}
	j, err := a.accountJWT(r)
	if err != nil {
		return Tenant{}, "", err
	}
	if err := a.save(r); err != nil {
		return Tenant{}, "", err
	}
	a.tenants[name] = r
	return r.Tenant, j, nil
}

// Update changes a tenant's quotas (fields of q that are zero keep their
// value) and returns the re-signed account JWT.
func (a *Authority) Update(name string, q Quotas) (Tenant, string, error) {
	if err := q.Check(); err != nil {
		return Tenant{}, "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.tenants[name]
	if !ok || r.Removed {
		return Tenant{}, "", fmt.Errorf("no tenant %q", name)
	}
	n := *r
	n.Quotas = r.Quotas.Merge(q)
	n.Updated = time.Now().UTC()
	j, err := a.accountJWT(&n)
	if err != nil {
		return Tenant{}, "", err
	}
	if err := a.save(&n); err != nil {
		return Tenant{}, "", err
	}
	a.tenants[name] = &n
	return n.Tenant, j, nil
}

// Remove revokes every user of the tenant and turns its JetStream off; it
// returns the account JWT that says so.
func (a *Authority) Remove(name string) (Tenant, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.tenants[name]
	if !ok || r.Removed {
		return Tenant{}, "", fmt.Errorf("no tenant %q", name)
	}
	n := *r
	n.Removed = true
	n.Updated = time.Now().UTC()
	j, err := a.accountJWT(&n)
	if err != nil {
		return Tenant{}, "", err
	}
	if err := a.save(&n); err != nil {
		return Tenant{}, "", err
	}
	a.tenants[name] = &n
	return n.Tenant, j, nil
}

func (a *Authority) save(r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(filepath.Join(a.dir, "tenants", r.Name+".json"), append(b, '\n'))
}

// Tenants lists the tenants (removed ones too) by name.
func (a *Authority) Tenants() []Tenant {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Tenant, 0, len(a.tenants))
	for _, r := range a.tenants {
		out = append(out, r.Tenant)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// Get returns the tenant called name.
func (a *Authority) Get(name string) (Tenant, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.tenants[name]
	if !ok {
		return Tenant{}, false
	}
	return r.Tenant, true
}

// ByAccount returns the tenant whose account has public key acct.
func (a *Authority) ByAccount(acct string) (Tenant, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.tenants {
		if r.Account == acct {
			return r.Tenant, true
		}
	}
	return Tenant{}, false
}

// Push sends an account JWT to the NATS servers through nc, a connection
// of the system account, and waits for a server to accept it.
func Push(nc *nats.Conn, accountJWT string) error {
	msg, err := nc.Request("$SYS.REQ.CLAIMS.UPDATE", []byte(accountJWT), 10*time.Second)
	if err != nil {
		return fmt.Errorf("pushing an account JWT to NATS: %w", err)
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return fmt.Errorf("pushing an account JWT to NATS: bad answer %q", msg.Data)
	}
	if r.Error != nil {
		return fmt.Errorf("pushing an account JWT to NATS: %s (code %d)", r.Error.Description, r.Error.Code)
	}
	return nil
}

// PushAll pushes every account's JWT (an external server started from an
// older ServerConfig learns the tenants added since).
func (a *Authority) PushAll(nc *nats.Conn) error {
	var errs []error
	for _, j := range a.jwts() {
		errs = append(errs, Push(nc, j))
	}
	return errors.Join(errs...)
}
