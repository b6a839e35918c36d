package api

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/logging"
	"github.com/wstream/wstream/transport"
)

//go:embed ui
var uiFiles embed.FS

// Config configures a Server.
type Config struct {
	Coordinator *coordinator.Coordinator
	// Addr is the host:port Start listens on ("127.0.0.1:0": a free port
	// on loopback).
	Addr string
	// Auth maps a bearer token to its caller; nil serves every request as
	// the admin (a cluster without tenants).
	Auth func(token string) (coordinator.Caller, bool)
	// Metrics, when set, is served at /metrics (the admin's only when
	// Auth is set).
	Metrics http.Handler
	// Log receives the listener's errors (nothing when nil).
	Log *slog.Logger
	// Deploy, when set, runs a module uploaded with POST /v1/jobs for
	// the caller and returns the job's id (docs/rest.md).
	Deploy func(ctx context.Context, who coordinator.Caller, req DeployRequest) (string, error)
	// Upgrade, when set, replaces a job's plan at a savepoint barrier as
	// `wstream upgrade` does, and returns once the new attempt runs:
	// POST /v1/jobs/{id}/rescale runs the same module at another
	// parallelism through it.
	Upgrade func(ctx context.Context, req transport.UpgradeRequest) (*transport.UpgradeReply, error)
	// MaxModuleBytes bounds an uploaded module (0:
	// transport.DefaultMaxModuleBytes).
	MaxModuleBytes int64
}

// Server is a running HTTP listener.
type Server struct {
	cfg Config
	ln  net.Listener
	// hosts are the Host headers a listener on loopback answers to (nil:
	// any, as on another interface).
	hosts []string
	srv   *http.Server
	sps   *savepoints
	rs    *rescales
	done  chan struct{}
}

// maxBody bounds a request's body: they are small JSON objects.
const maxBody = 64 << 10

// New returns a server whose Handler serves cfg; Start listens too.
func New(cfg Config) (*Server, error) {
	if cfg.Coordinator == nil {
		return nil, errors.New("api: no coordinator")
	}
	cfg.Log = logging.OrDiscard(cfg.Log).With(logging.Component, "api")
	return &Server{cfg: cfg, sps: newSavepoints(), rs: newRescales()}, nil
}

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api: listening on %s: %w", addr, err)
	}
	s.ln = ln
	s.hosts = loopbackHosts(addr, ln.Addr())
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Log.Error("serving HTTP", "err", err)
		}
	}()
	return s, nil
}

// URL is the server's base URL, such as http://127.0.0.1:8081; a
// listener on every interface shows as http://0.0.0.0:PORT.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	a, ok := s.ln.Addr().(*net.TCPAddr)
	if !ok {
		return "http://" + s.ln.Addr().String()
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "0.0.0.0"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// Close stops the listener, waiting up to ctx for requests in flight.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// loopbackHosts returns the Host headers that name a listener on loopback
// at addr (as configured) bound to bound: its address, localhost,
// 127.0.0.1 and [::1] with its port, and without the port on port 80.
// It returns nil for a listener on another interface.
func loopbackHosts(addr string, bound net.Addr) []string {
	a, ok := bound.(*net.TCPAddr)
	if !ok || !a.IP.IsLoopback() {
		return nil
	}
	port := strconv.Itoa(a.Port)
	names := []string{"127.0.0.1", "localhost", "::1", a.IP.String()}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
		names = append(names, h)
	}
	var out []string
	for _, n := range names {
		n = strings.ToLower(n)
		hp := net.JoinHostPort(n, port)
		if !slices.Contains(out, hp) {
			out = append(out, hp)
		}
		if port == "80" && !slices.Contains(out, n) {
			if strings.Contains(n, ":") {
				n = "[" + n + "]"
			}
			out = append(out, n)
		}
	}
	return out
}

// checkHost refuses a request to a loopback listener whose Host header
// names another server: a page whose site's name resolves to 127.0.0.1
// (DNS rebinding) would otherwise be of this server's own origin, and pass
// the Origin check.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if s.hosts == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(s.hosts, strings.ToLower(r.Host)) {
			next.ServeHTTP(w, r)
			return
		}
		who := coordinator.Caller{User: "rest " + r.RemoteAddr}
		if s.cfg.Auth != nil {
			who.Tenant = "?"
		}
		err := fmt.Errorf("the Host header %q names another server: this one listens on loopback and answers as %s only", r.Host, strings.Join(s.hosts, ", "))
		s.cfg.Coordinator.Audit(who, "rest "+r.Method+" "+r.URL.Path, "", err)
		writeError(w, http.StatusMisdirectedRequest, err.Error())
	})
}

// Handler serves the UI, the API and the metrics, to requests whose Host
// the listener answers to.
func (s *Server) Handler() http.Handler {
	return s.checkHost(s.toLeader(s.routes()))
}

// toLeader sends every API request a standby coordinator's server gets to
// the leader's API (307, or 503 naming the leader when its API is not
// known): a standby holds no jobs of its own.
func (s *Server) toLeader(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, leading := s.cfg.Coordinator.Leader()
		w.Header().Set("Wstream-Leader", l.ID)
		if leading || !strings.HasPrefix(r.URL.Path, "/v1/") {
			h.ServeHTTP(w, r)
			return
		}
		if l.HTTP == "" {
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("this coordinator is a standby; %s leads (its REST API is not known)", l.ID))
			return
		}
		http.Redirect(w, r, strings.TrimSuffix(l.HTTP, "/")+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	})
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	ui, _ := fs.Sub(uiFiles, "ui")
	files := http.FileServerFS(ui)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": the UI's files are read with GET")
			return
		}
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /metrics", s.authed(func(w http.ResponseWriter, r *http.Request, who coordinator.Caller) {
		if s.cfg.Metrics == nil {
			writeError(w, http.StatusNotFound, "this server exports no metrics")
			return
		}
		if who.Tenant != "" {
			err := s.cfg.Coordinator.Audit(who, "rest GET /metrics", "", errors.New("only the cluster's admin reads the metrics"))
			writeError(w, http.StatusForbidden, err.Error())
			return
		}
		s.cfg.Metrics.ServeHTTP(w, r)
	}))
	// Reads are audited when they are refused.
	get := func(pattern string, h readHandler) {
		mux.HandleFunc("GET "+pattern, s.authed(func(w http.ResponseWriter, r *http.Request, who coordinator.Caller) {
			v, err := h(r, who)
			if err != nil {
				writeErr(w, s.cfg.Coordinator.Audit(who, "rest GET "+r.URL.Path, r.PathValue("id"), err))
				return
			}
			writeJSON(w, http.StatusOK, v)
		}))
	}
	s.jobReads(get)
	s.checkpointReads(get)
	s.actions(mux)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no endpoint "+r.Method+" "+r.URL.Path+" (see docs/rest.md)")
	})
	return mux
}

// readHandler answers a GET with the value to write as JSON, or an error.
type readHandler func(r *http.Request, who coordinator.Caller) (any, error)

// jobReads serves the cluster's and the jobs' GETs but for checkpoints.
func (s *Server) jobReads(get func(pattern string, h readHandler)) {
	c := s.cfg.Coordinator
	get("/v1/config", func(r *http.Request, who coordinator.Caller) (any, error) { return s.config(), nil })
	get("/v1/overview", func(r *http.Request, who coordinator.Caller) (any, error) { return c.Overview(who), nil })
	get("/v1/workers", func(r *http.Request, who coordinator.Caller) (any, error) {
		ws, err := c.WorkerStatuses(who)
		out := WorkersReply{Workers: []Worker{}}
		for _, w := range ws {
			out.Workers = append(out.Workers, WorkerOf(w.WorkerRow, w.Subtasks))
		}
		return out, err
	})
	get("/v1/jobs", func(r *http.Request, who coordinator.Caller) (any, error) {
		out := JobsReply{Jobs: []JobSummary{}}
		for _, j := range c.Jobs(who) {
			if d, err := c.Job(who, j.JobID); err == nil {
				out.Jobs = append(out.Jobs, JobOf(d).JobSummary)
			} else {
				// Gone between the list and the detail, or a plan that
				// does not build: the row alone.
				out.Jobs = append(out.Jobs, SummaryOf(j, time.Now()))
			}
		}
		return out, nil
	})
	get("/v1/jobs/{id}", func(r *http.Request, who coordinator.Caller) (any, error) {
		d, err := c.Job(who, r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return JobOf(d), nil
	})
	get("/v1/jobs/{id}/config", func(r *http.Request, who coordinator.Caller) (any, error) {
		p, err := c.JobPlan(who, r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return ConfigOfJob{JobID: r.PathValue("id"), Plan: json.RawMessage(p.JSON())}, nil
	})
	get("/v1/jobs/{id}/rescale", func(r *http.Request, who coordinator.Caller) (any, error) {
		id := r.PathValue("id")
		if err := c.CanSee(who, id); err != nil {
			return nil, err
		}
		st, ok := s.rs.get(id)
		if !ok {
			return nil, notFound("job %s has not been rescaled through this server", id)
		}
		return st, nil
	})
	get("/v1/jobs/{id}/vertices/{vertex}", func(r *http.Request, who coordinator.Caller) (any, error) {
		return c.Vertex(who, r.PathValue("id"), r.PathValue("vertex"))
	})
	get("/v1/jobs/{id}/exceptions", func(r *http.Request, who coordinator.Caller) (any, error) {
		x, err := c.Exceptions(who, r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return ExceptionsOf(x), nil
	})
}

// checkpointReads serves the GETs of a job's checkpoints and savepoint
// requests.
func (s *Server) checkpointReads(get func(pattern string, h readHandler)) {
	c := s.cfg.Coordinator
	get("/v1/jobs/{id}/checkpoints", func(r *http.Request, who coordinator.Caller) (any, error) {
		return c.Checkpoints(who, r.PathValue("id"))
	})
	get("/v1/jobs/{id}/checkpoints/history", func(r *http.Request, who coordinator.Caller) (any, error) {
		limit := 0
		if q := r.URL.Query().Get("limit"); q != "" {
			n, err := strconv.Atoi(q)
			if err != nil || n < 1 {
				return nil, badRequest("limit %q: want a whole number ≥ 1", q)
			}
			limit = n
		}
		h, err := c.CheckpointHistory(who, r.PathValue("id"), limit)
		out := CheckpointList{JobID: r.PathValue("id"), History: []Checkpoint{}}
		for _, st := range h {
			out.History = append(out.History, Checkpoint{CheckpointStats: st})
		}
		return out, err
	})
	get("/v1/jobs/{id}/checkpoints/summary", func(r *http.Request, who coordinator.Caller) (any, error) {
		return c.CheckpointSummary(who, r.PathValue("id"))
	})
	get("/v1/jobs/{id}/checkpoints/{cid}", func(r *http.Request, who coordinator.Caller) (any, error) {
		cid, err := strconv.ParseInt(r.PathValue("cid"), 10, 64)
		if err != nil || cid < 1 {
			return nil, badRequest("checkpoint id %q: want a whole number ≥ 1", r.PathValue("cid"))
		}
		return c.Checkpoint(who, r.PathValue("id"), cid)
	})
	get("/v1/jobs/{id}/savepoints", func(r *http.Request, who coordinator.Caller) (any, error) {
		id := r.PathValue("id")
		if err := c.CanSee(who, id); err != nil {
			return nil, err
		}
		return SavepointsReply{JobID: id, Requests: s.sps.list(id)}, nil
	})
	get("/v1/jobs/{id}/savepoints/{request}", func(r *http.Request, who coordinator.Caller) (any, error) {
		id := r.PathValue("id")
		if err := c.CanSee(who, id); err != nil {
			return nil, err
		}
		sp, ok := s.sps.get(id, r.PathValue("request"))
		if !ok {
			return nil, notFound("job %s has no savepoint request %q", id, r.PathValue("request"))
		}
		return sp, nil
	})
}

// actions serves the POSTs: deploy, rescale, savepoint, stop and cancel.
func (s *Server) actions(mux *http.ServeMux) {
	c := s.cfg.Coordinator
	mux.HandleFunc("POST /v1/jobs", s.authed(s.postJob))
	mux.HandleFunc("POST /v1/jobs/{id}/rescale", s.authed(s.postRescale))
	mux.HandleFunc("POST /v1/jobs/{id}/savepoints", s.authed(s.postSavepoint(false)))
	mux.HandleFunc("POST /v1/jobs/{id}/stop", s.authed(s.postSavepoint(true)))
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", s.authed(func(w http.ResponseWriter, r *http.Request, who coordinator.Caller) {
		id := r.PathValue("id")
		// A job that has ended has nothing to cancel: 409, as the NATS
		// client's cancel refuses it.
		for _, j := range c.Jobs(who) {
			if j.JobID == id && (j.State == "FINISHED" || j.State == "FAILED" || j.State == "CANCELED" || j.State == "SUSPENDED") {
				err := fmt.Errorf("job %s has already ended (%s): there is nothing to cancel", id, j.State)
				writeError(w, http.StatusConflict, c.Audit(who, "rest POST "+r.URL.Path, id, err).Error())
				return
			}
		}
		if err := c.Cancel(who, id); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusAccepted, CancelReply{JobID: id, Cancelling: true})
	}))
}

// Replies that wrap a list, so that the API can add fields beside it.
type (
	JobsReply struct {
		Jobs []JobSummary `json:"jobs"`
	}
	WorkersReply struct {
		Workers []Worker `json:"workers"`
	}
	// ConfigOfJob is a job's configuration: the plan its current attempt
	// runs (docs/plan.md).
	ConfigOfJob struct {
		JobID string          `json:"jobId"`
		Plan  json.RawMessage `json:"plan"`
	}
	SavepointsReply struct {
		JobID    string            `json:"jobId"`
		Requests []SavepointStatus `json:"requests"`
	}
	CancelReply struct {
		JobID      string `json:"jobId"`
		Cancelling bool   `json:"cancelling"`
	}
)

// savepointBody is the body of a savepoint or stop request; both fields
// are optional.
type savepointBody struct {
	// Dir is where the savepoint goes (a directory or nats-obj://...);
	// default the server's (DATA/savepoints, or the tenant's own).
	Dir string `json:"dir"`
	// Drain, with stop: advance event time to the end first.
	Drain bool `json:"drain"`
}

func (s *Server) postSavepoint(stop bool) func(http.ResponseWriter, *http.Request, coordinator.Caller) {
	return func(w http.ResponseWriter, r *http.Request, who coordinator.Caller) {
		c := s.cfg.Coordinator
		id := r.PathValue("id")
		action := "savepoint"
		if stop {
			action = "stop with savepoint"
		}
		refuse := func(status int, err error) {
			writeError(w, status, c.Audit(who, action, id, err).Error())
		}
		var body savepointBody
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err == nil && len(b) > maxBody {
			err = fmt.Errorf("the body is over %d bytes", maxBody)
		}
		if err == nil && len(strings.TrimSpace(string(b))) > 0 {
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			err = dec.Decode(&body)
		}
		if err != nil {
			refuse(http.StatusBadRequest, fmt.Errorf(`bad request body: %w (want {"dir": "...", "drain": false}, both optional)`, err))
			return
		}
		if body.Drain && !stop {
			refuse(http.StatusBadRequest, errors.New("drain goes with stop, not with a savepoint"))
			return
		}
		// The coordinator refuses a job who cannot see, and audits the
		// request once it is answered.
		req := s.sps.start(id, stop)
		refused := make(chan transport.SavepointReply, 1)
		started := make(chan struct{})
		c.Savepoint(who, transport.SavepointRequest{JobID: id, Dir: body.Dir, Stop: stop, Drain: body.Drain}, func(rep transport.SavepointReply) {
			select {
			case <-started:
				s.sps.finish(req, rep)
			default:
				// Answered before the request was under way: refused.
				refused <- rep
			}
		})
		close(started)
		select {
		case rep := <-refused:
			if rep.Error == "" {
				// Completed before this goroutine went on.
				s.sps.finish(req, rep)
				break
			}
			s.sps.drop(req)
			status := http.StatusConflict
			if strings.HasPrefix(rep.Error, "no job") {
				status = http.StatusNotFound
			} else if strings.Contains(rep.Error, "savepoints live in") {
				status = http.StatusForbidden
			}
			writeError(w, status, rep.Error)
			return
		default:
		}
		writeJSON(w, http.StatusAccepted, s.sps.snapshot(req))
	}
}

// authed authenticates a request and hands it on with its caller.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, coordinator.Caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		limit := int64(maxBody + 1)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/jobs" {
			// A module upload.
			limit = s.maxModule() + 2<<20
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		user := "rest " + r.RemoteAddr
		who := coordinator.Caller{User: user}
		if s.cfg.Auth != nil {
			tok, ok := bearer(r)
			var caller coordinator.Caller
			if ok {
				caller, ok = s.cfg.Auth(tok)
			}
			if !ok {
				s.cfg.Coordinator.Audit(coordinator.Caller{Tenant: "?", User: user}, "rest "+r.Method+" "+r.URL.Path, "", errors.New("not authorized: no valid bearer token"))
				w.Header().Set("WWW-Authenticate", `Bearer realm="wstream"`)
				writeError(w, http.StatusUnauthorized, "not authorized: send the tenant's or the admin's API token as Authorization: Bearer TOKEN")
				return
			}
			who = coordinator.Caller{Tenant: caller.Tenant, User: user}
		}
		if r.Method == http.MethodPost {
			if err := checkPost(r); err != nil {
				err = s.cfg.Coordinator.Audit(who, "rest POST "+r.URL.Path, r.PathValue("id"), err)
				writeError(w, http.StatusForbidden, err.Error())
				return
			}
		}
		h(w, r, who)
	}
}

// checkPost refuses what a page on another site could make a browser
// send: a form's content type, or another origin.
func checkPost(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	switch {
	case r.URL.Path == "/v1/jobs" && strings.HasPrefix(ct, "multipart/form-data"):
		// A form a page elsewhere could post, but not with this header.
		if r.Header.Get(deployHeader) == "" {
			return fmt.Errorf("a module upload needs the header %s: 1", deployHeader)
		}
	case !strings.HasPrefix(ct, "application/json"):
		return fmt.Errorf("POST requests need Content-Type: application/json (got %q)", ct)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return fmt.Errorf("origin %s may not act on this server", o)
	}
	return nil
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// httpError is an error with its HTTP status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

func writeErr(w http.ResponseWriter, err error) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		writeError(w, he.status, he.msg)
	case errors.Is(err, coordinator.ErrNoJob), errors.Is(err, coordinator.ErrNoCheckpoint):
		writeError(w, http.StatusNotFound, strings.TrimPrefix(err.Error(), "coordinator: "))
	case errors.Is(err, coordinator.ErrAdminOnly):
		writeError(w, http.StatusForbidden, strings.TrimPrefix(err.Error(), "coordinator: "))
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
