package main

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

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

// ownJSON are the commands that print an object of their own with -o
// json; REST's where it has the same object.
var ownJSON = map[string]bool{
	"list": true, "workers": true, "checkpoints": true, "inspect": true, "version": true,
	"cancel": true, "savepoint": true, "stop": true, "upgrade": true, "deploy": true, "follow": true,
	"build": true, "init": true, "completion": true, "server": true, "worker": true,
	"tenant list": true, "tenant update": true, "context ls": true,
}

// withOutput gives every command -o (table or json). A command without an
// object of its own prints, with -o json, what it did as
// {"command": ..., "output": [lines]}: one JSON object whatever the
// command, and the lines it would have printed for a person.
func withOutput(cmds []*cli.Command, parent string) {
	for _, cmd := range cmds {
		name := strings.TrimSpace(parent + " " + cmd.Name)
		if len(cmd.Subcommands) > 0 {
			withOutput(cmd.Subcommands, name)
			continue
		}
		if cmd.Action == nil || cmd.Hidden {
			continue
		}
		if !slices.ContainsFunc(cmd.Flags, func(f cli.Flag) bool { return hasName(f, "output") }) {
			cmd.Flags = append(cmd.Flags, outputFlag)
		}
		act, own := cmd.Action, ownJSON[name]
		cmd.Action = func(c *cli.Context) error {
			// A bad format is bad usage, before anything else is checked.
			asJSON, err := jsonOutput(c)
			if err != nil {
				return err
			}
			if own || !asJSON {
				return act(c)
			}
			// Both streams: some commands say what they did on stderr.
			w, ew := c.App.Writer, c.App.ErrWriter
			var out bytes.Buffer
			c.App.Writer, c.App.ErrWriter = &out, &out
			err = act(c)
			c.App.Writer, c.App.ErrWriter = w, ew
			if err != nil {
				// What it said before it failed is for a person.
				_, _ = ew.Write(out.Bytes())
				return err
			}
			return writeJSON(w, commandOutput{Command: name, Output: orEmpty(lines(out.String()))})
		}
	}
}

// commandOutput is -o json of a command that has no object of its own.
type commandOutput struct {
	Command string   `json:"command"`
	Output  []string `json:"output"`
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
