package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
	"github.com/wstream/wstream/host"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/operator/builtin"
)

// dryRun checks what validation leaves to the job's start: that the module
// has every operator the plan names and each opens with its config, that
// file sources and sinks find their paths (local jobs: a cluster's paths
// are its workers'), and that --from-savepoint fits the plan.
func dryRun(ctx context.Context, rt *host.Runtime, d *engine.Deployment, local bool) error {
	if d.Wasm != nil && rt != nil {
		if err := openOperators(ctx, rt, d); err != nil {
			return err
		}
	}
	if local {
		if err := checkPaths(d.Plan); err != nil {
			return err
		}
	}
	if d.FromSavepoint != "" && !checkpoint.IsObjectLocation(d.FromSavepoint) {
		if err := coordinator.CheckSavepoint(d.FromSavepoint, d.Plan, d.AllowNonRestoredState); err != nil {
			return fmt.Errorf("--from-savepoint: %w", err)
		}
	}
	return nil
}

// openOperators opens every WebAssembly operator of the plan once, in an
// instance per chain as a worker does, with state that holds nothing: an
// operator the module does not have, or a config it refuses, fails here.
func openOperators(ctx context.Context, rt *host.Runtime, d *engine.Deployment) error {
	mod, err := rt.Compile(ctx, d.ModuleName, d.Wasm)
	if err != nil {
		return err
	}
	defer mod.Close(ctx)
	for _, c := range d.Graph.Chains {
		head := c.Vertices[0]
		keyed := head.Kind == job.KindOperator && len(c.Inputs) > 0
		for _, e := range c.Inputs {
			if e.Partition != job.PartitionKey {
				keyed = false
			}
		}
		var inst *host.Instance
		for k, v := range c.Vertices {
			if v.Kind != job.KindOperator || strings.HasPrefix(v.Operator, builtin.Prefix) {
				continue
			}
			if inst == nil {
				if inst, err = mod.NewInstance(ctx, "dry-run "+c.ID); err != nil {
					return fmt.Errorf("vertex %q: instantiating module %s: %w", v.ID, d.ModuleName, err)
				}
				defer inst.Close(ctx)
			}
			spec := operator.Spec{VertexID: v.ID, Operator: v.Operator, Config: v.Config, Outputs: v.Outputs,
				Parallel: c.Parallelism, MaxParallelism: d.Plan.MaxParallelism, Keyed: k == 0 && keyed}
			if err := inst.Operator().Open(spec, &dryServices{}); err != nil {
				return fmt.Errorf("module %s: %w", d.ModuleName, err)
			}
		}
	}
	return nil
}

// checkPaths checks that a file source's file exists and a file sink's
// directory does.
func checkPaths(p *job.Plan) error {
	for _, v := range p.Vertices {
		if v.Connector != "file" {
			continue
		}
		var cfg struct {
			Path string `json:"path"`
		}
		if err := json.Unmarshal(v.Config, &cfg); err != nil || cfg.Path == "" {
			continue // validation has said what is wrong with it
		}
		switch v.Kind {
		case job.KindSource:
			fi, err := os.Stat(cfg.Path)
			if err != nil {
				return fmt.Errorf("source %q: %w", v.ID, err)
			}
			if fi.IsDir() {
				return fmt.Errorf("source %q: %s is a directory, not a file", v.ID, cfg.Path)
			}
		case job.KindSink:
			dir := filepath.Dir(cfg.Path)
			fi, err := os.Stat(dir)
			if err == nil && !fi.IsDir() {
				err = errors.New("not a directory")
			}
			if err != nil {
				return fmt.Errorf("sink %q: the directory of %s: %w", v.ID, cfg.Path, err)
			}
		}
	}
	return nil
}

// dryServices is the state of an operator opened by a dry run: it takes
// registrations and holds nothing.
type dryServices struct{ states []string }

func (s *dryServices) RegisterState(name string, kind int32) (int32, error) {
	for i, n := range s.states {
		if n == name {
			return int32(i), nil
		}
	}
	s.states = append(s.states, name)
	return int32(len(s.states) - 1), nil
}

var errDryRun = errors.New("a dry run holds no state")

func (s *dryServices) StateGet(h int32, key, ns, dst []byte) ([]byte, error) {
	return nil, operator.ErrNotFound
}
func (s *dryServices) StatePut(h int32, key, ns, value []byte) error { return errDryRun }
func (s *dryServices) StateDelete(h int32, key, ns []byte) error     { return nil }
func (s *dryServices) StateIter(h int32, key, prefix, after []byte, fn func(ns, value []byte) bool) error {
	return nil
}
func (s *dryServices) RegisterTimer(domain int32, key, ns []byte, ts int64) error { return errDryRun }
func (s *dryServices) DeleteTimer(domain int32, key, ns []byte, ts int64) error   { return nil }
func (s *dryServices) Watermark() int64                                           { return 0 }
func (s *dryServices) ProcessingTime() int64                                      { return 0 }
func (s *dryServices) Log(level int32, msg string)                                {}
