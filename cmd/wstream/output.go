package main

import (
	"encoding/json"
	"io"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// -o json prints the REST API's view of the same objects (package api's
// view types): the same field names, milliseconds, bytes and string
// enums, whether a script reads the CLI or GET /v1/....

func init() { api.Version = version }

// jsonView turns the rows of a listing into the reply the REST API gives
// for them: {"jobs": [...]} as GET /v1/jobs, {"workers": [...]} as GET
// /v1/workers. What the control plane does not tell the CLI (a job's
// tasks and end, a worker's subtasks) is null.
func jsonView(rows any) any {
	switch r := rows.(type) {
	case []transport.JobInfo:
		out := api.JobsReply{Jobs: []api.JobSummary{}}
		for _, j := range r {
			out.Jobs = append(out.Jobs, api.SummaryOf(j, now()))
		}
		return out
	case []transport.WorkerRow:
		out := api.WorkersReply{Workers: []api.Worker{}}
		for _, w := range r {
			out.Workers = append(out.Workers, api.WorkerOf(w, nil))
		}
		return out
	}
	return rows
}

// checkpointsJSON writes a job's checkpoint history from its data
// directory as GET /v1/jobs/{id}/checkpoints/history shows it, with the
// checkpoints retained and the upgrades.
func checkpointsJSON(w io.Writer, id string, hist []coordinator.HistoryEntry, ids []int64, ups []coordinator.UpgradeEntry) error {
	out := api.CheckpointList{JobID: id, History: []api.Checkpoint{}, Retained: orEmpty(ids), Upgrades: api.UpgradesOf(ups)}
	for _, e := range hist {
		out.History = append(out.History, api.CheckpointOf(e))
	}
	return writeJSON(w, out)
}

// tenantsJSON writes the tenants of a list reply: {"tenants": [...]},
// quotas in bytes with the defaults filled in.
func tenantsJSON(w io.Writer, r *transport.TenantReply) error {
	out := struct {
		Tenants []api.Tenant `json:"tenants"`
	}{Tenants: []api.Tenant{}}
	for _, raw := range r.Tenants {
		var t tenant.Tenant
		if err := json.Unmarshal(raw, &t); err != nil {
			return err
		}
		out.Tenants = append(out.Tenants, api.TenantOf(t))
	}
	return writeJSON(w, out)
}
