package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/transport"
)

// DeployRequest is a module uploaded with POST /v1/jobs and how to run
// it, as `wstream deploy` takes it.
type DeployRequest struct {
	// Module is the .wasm file, ModuleName its file name.
	Module     []byte
	ModuleName string
	// Plan, when set, is used instead of the plan the module exports.
	Plan []byte
	// Name is the job's name (default the plan's).
	Name string
	// Overrides are --parallelism, --vertex-parallelism, --source and
	// --sink.
	Overrides job.Overrides
	// CheckpointIntervalMillis, when > 0, takes a checkpoint this often.
	CheckpointIntervalMillis int64
}

// DeployReply answers POST /v1/jobs.
type DeployReply struct {
	JobID string `json:"jobId"`
}

// deployHeader must come with a module upload: a multipart form is what a
// page on another site can post, but not with a header of its own (that
// takes a CORS preflight, which this server never grants).
const deployHeader = "Wstream-Deploy"

func (s *Server) maxModule() int64 {
	if s.cfg.MaxModuleBytes > 0 {
		return s.cfg.MaxModuleBytes
	}
	return transport.DefaultMaxModuleBytes
}

// postJob deploys an uploaded module: a multipart form with the parts
// module (the .wasm file) and, all optional, plan (JSON), name,
// parallelism, vertexParallelism (ID=N, repeatable), source and sink
// (connector specs, repeatable) and checkpointInterval (milliseconds).
func (s *Server) postJob(w http.ResponseWriter, r *http.Request, who coordinator.Caller) {
	c := s.cfg.Coordinator
	refuse := func(status int, err error) {
		writeError(w, status, c.Audit(who, "rest POST /v1/jobs", "", err).Error())
	}
	if s.cfg.Deploy == nil {
		refuse(http.StatusNotImplemented, errors.New("this server does not deploy modules (it has no runtime of its own)"))
		return
	}
	req, err := s.readDeploy(r)
	if err != nil {
		refuse(http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	id, err := s.cfg.Deploy(ctx, who, req)
	if err != nil {
		// The deploy path answers with the same words as `wstream deploy`.
		refuse(http.StatusBadRequest, err)
		return
	}
	c.Audit(who, "rest POST /v1/jobs", id, nil)
	w.Header().Set("Location", "/v1/jobs/"+id)
	writeJSON(w, http.StatusCreated, DeployReply{JobID: id})
}

// readDeploy parses the multipart form of a deploy.
func (s *Server) readDeploy(r *http.Request) (DeployRequest, error) {
	var req DeployRequest
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" {
		return req, fmt.Errorf("POST /v1/jobs takes a multipart/form-data upload with a module part (got %q)", r.Header.Get("Content-Type"))
	}
	// The module is held in memory: it is stored in the cluster's module
	// bucket from there anyway.
	if err := r.ParseMultipartForm(s.maxModule() + 1<<20); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, fmt.Errorf("the upload is over %d bytes", s.maxModule())
		}
		return req, fmt.Errorf("reading the upload: %w", err)
	}
	defer r.MultipartForm.RemoveAll()
	f, hdr, err := r.FormFile("module")
	if err != nil {
		return req, errors.New("the upload has no module part (the .wasm file)")
	}
	defer f.Close()
	req.Module, err = io.ReadAll(io.LimitReader(f, s.maxModule()+1))
	if err != nil {
		return req, fmt.Errorf("reading the module: %w", err)
	}
	if int64(len(req.Module)) > s.maxModule() {
		return req, fmt.Errorf("module %s is over %d bytes", hdr.Filename, s.maxModule())
	}
	req.ModuleName = filepath.Base(hdr.Filename)
	if req.ModuleName == "." || req.ModuleName == "/" || req.ModuleName == "" {
		req.ModuleName = "module.wasm"
	}
	form := r.MultipartForm.Value
	one := func(k string) string {
		if v := form[k]; len(v) > 0 {
			return strings.TrimSpace(v[0])
		}
		return ""
	}
	if p, ph, err := r.FormFile("plan"); err == nil {
		req.Plan, err = io.ReadAll(io.LimitReader(p, maxBody+1))
		p.Close()
		if err != nil || len(req.Plan) > maxBody {
			return req, fmt.Errorf("plan %s: unreadable or over %d bytes", ph.Filename, maxBody)
		}
	} else if v := one("plan"); v != "" {
		req.Plan = []byte(v)
	}
	req.Name = one("name")
	if v := one("parallelism"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return req, fmt.Errorf("parallelism %q: want a whole number ≥ 1", v)
		}
		req.Overrides.Parallelism = n
	}
	for _, spec := range form["vertexParallelism"] {
		id, n, err := vertexParallelism(spec)
		if err != nil {
			return req, err
		}
		if req.Overrides.VertexParallelism == nil {
			req.Overrides.VertexParallelism = map[string]int{}
		}
		req.Overrides.VertexParallelism[id] = n
	}
	req.Overrides.Source = nonEmpty(form["source"])
	req.Overrides.Sink = nonEmpty(form["sink"])
	if v := one("checkpointInterval"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, fmt.Errorf("checkpointInterval %q: want milliseconds, a whole number ≥ 0", v)
		}
		req.CheckpointIntervalMillis = n
	}
	return req, nil
}

func nonEmpty(s []string) []string {
	var out []string
	for _, v := range s {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func vertexParallelism(spec string) (string, int, error) {
	id, v, ok := strings.Cut(spec, "=")
	n, err := strconv.Atoi(v)
	if !ok || id == "" || err != nil || n < 1 {
		return "", 0, fmt.Errorf("vertex parallelism %q: want ID=N with N ≥ 1", spec)
	}
	return id, n, nil
}

// RescaleBody is the body of POST /v1/jobs/{id}/rescale: the new
// parallelism of the job's vertices that follow the job's, and of
// single vertices by id.
type RescaleBody struct {
	Parallelism int            `json:"parallelism"`
	Vertices    map[string]int `json:"vertices"`
}

// Rescale statuses.
const (
	RescaleInProgress = "IN_PROGRESS"
	RescaleCompleted  = "COMPLETED"
	RescaleFailed     = "FAILED"
)

// UpgradeStatus is an upgrade of a running job asked for: what `wstream
// upgrade -o json` prints, and the fields of a rescale through REST (GET
// /v1/jobs/{id}/rescale), which goes the same way. Times are Unix ms.
type UpgradeStatus struct {
	JobID       string `json:"jobId"`
	Status      string `json:"status"`
	RequestedAt int64  `json:"requestedAt"`
	// EndTime, Savepoint (the barrier's), Attempt (the one that runs
	// afterwards) and DowntimeMillis once it has ended; Error says why it
	// failed (the job then runs on as it was).
	EndTime        int64  `json:"endTime,omitempty"`
	Savepoint      int64  `json:"savepoint,omitempty"`
	SavepointDir   string `json:"savepointDir,omitempty"`
	Attempt        int    `json:"attempt,omitempty"`
	DowntimeMillis int64  `json:"downtimeMillis,omitempty"`
	Error          string `json:"error,omitempty"`
}

// Finish records the coordinator's answer to the upgrade: rep may be nil
// when err says why none came.
func (u *UpgradeStatus) Finish(rep *transport.UpgradeReply, err error, now time.Time) {
	u.EndTime = now.UnixMilli()
	if rep != nil {
		u.Savepoint, u.SavepointDir, u.Attempt = rep.Savepoint, rep.SavepointDir, rep.Attempt
		if rep.DowntimeKnown {
			u.DowntimeMillis = rep.Downtime.Milliseconds()
		}
	}
	if err != nil {
		u.Status, u.Error = RescaleFailed, err.Error()
		return
	}
	u.Status = RescaleCompleted
}

// RescaleStatus is a rescale of a job through the REST API: an upgrade
// to the job's own module at the parallelism asked for.
type RescaleStatus struct {
	UpgradeStatus
	Parallelism int            `json:"parallelism"`
	Vertices    map[string]int `json:"vertices"`
}

// rescales holds each job's latest rescale; it has its own lock.
type rescales struct {
	mu    sync.Mutex
	byJob map[string]*RescaleStatus
}

func newRescales() *rescales { return &rescales{byJob: map[string]*RescaleStatus{}} }

func (r *rescales) get(id string) (RescaleStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.byJob[id]
	if !ok {
		return RescaleStatus{}, false
	}
	return *st, true
}

// start records a rescale of job id, unless one is under way.
func (r *rescales) start(st RescaleStatus) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.byJob[st.JobID]; ok && cur.Status == RescaleInProgress {
		return false
	}
	r.byJob[st.JobID] = &st
	return true
}

func (r *rescales) finish(id string, f func(*RescaleStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.byJob[id]; ok {
		f(st)
	}
}

// postRescale changes a running job's parallelism: the same module and
// plan at the new parallelism, through the upgrade path — a
// stop-with-savepoint, then the next attempt of the same job from that
// savepoint, rolled back to the old parallelism if it fails before its
// first checkpoint. It answers 202 at once; GET /v1/jobs/{id}/rescale
// follows it.
func (s *Server) postRescale(w http.ResponseWriter, r *http.Request, who coordinator.Caller) {
	c := s.cfg.Coordinator
	id := r.PathValue("id")
	refuse := func(status int, err error) {
		writeError(w, status, c.Audit(who, "rescale", id, err).Error())
	}
	// Whether the job is the caller's comes first: another tenant's job
	// answers as one that never was, whatever the body.
	d, err := c.Job(who, id)
	if err != nil {
		writeErr(w, c.Audit(who, "rescale", id, err))
		return
	}
	if s.cfg.Upgrade == nil {
		refuse(http.StatusNotImplemented, errors.New("this server cannot rescale jobs"))
		return
	}
	var body RescaleBody
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		refuse(http.StatusBadRequest, fmt.Errorf(`bad request body: %v (want {"parallelism": N, "vertices": {"ID": N}}, either)`, err))
		return
	}
	if body.Parallelism == 0 && len(body.Vertices) == 0 {
		refuse(http.StatusBadRequest, errors.New(`a rescale names a parallelism or vertices' ({"parallelism": N} or {"vertices": {"ID": N}})`))
		return
	}
	if d.State != "RUNNING" {
		refuse(http.StatusConflict, fmt.Errorf("job %s is %s: only a running job rescales", id, d.State))
		return
	}
	if d.Checkpointing == nil {
		refuse(http.StatusConflict, fmt.Errorf("job %s does not checkpoint: a rescale moves its state through a savepoint; deploy it with --checkpoint-interval", id))
		return
	}
	plan, err := c.JobPlan(who, id)
	if err != nil {
		writeErr(w, c.Audit(who, "rescale", id, err))
		return
	}
	err = plan.Apply(job.Overrides{Parallelism: body.Parallelism, VertexParallelism: body.Vertices, MaxParallelism: plan.MaxParallelism})
	if err == nil {
		err = plan.Validate()
	}
	if err != nil {
		refuse(http.StatusBadRequest, err)
		return
	}
	st := RescaleStatus{UpgradeStatus: UpgradeStatus{JobID: id, Status: RescaleInProgress, RequestedAt: time.Now().UnixMilli()},
		Parallelism: body.Parallelism, Vertices: body.Vertices}
	if st.Vertices == nil {
		st.Vertices = map[string]int{}
	}
	if !s.rs.start(st) {
		refuse(http.StatusConflict, fmt.Errorf("job %s is being rescaled already", id))
		return
	}
	req := transport.UpgradeRequest{JobID: id, Plan: plan.JSON(), ModuleDigest: d.ModuleDigest, ModuleName: d.Module}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		rep, err := s.cfg.Upgrade(ctx, req)
		if err == nil && rep.Error != "" {
			err = errors.New(rep.Error)
		}
		c.Audit(who, "rescale", id, err)
		s.rs.finish(id, func(st *RescaleStatus) { st.Finish(rep, err, time.Now()) })
	}()
	cur, _ := s.rs.get(id)
	writeJSON(w, http.StatusAccepted, cur)
}

func (s *Server) config() ConfigReply {
	out := ConfigReply{VersionInfo: Build(), Tenants: s.cfg.Auth != nil, Features: []string{},
		RefreshMillis: 1000, MaxModuleBytes: s.maxModule()}
	if s.cfg.Deploy != nil {
		out.Features = append(out.Features, "deploy")
	}
	if s.cfg.Upgrade != nil {
		out.Features = append(out.Features, "rescale")
	}
	return out
}
