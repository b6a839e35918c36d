package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/transport"
)

func listCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the jobs of a cluster: state, attempt, last restart cause",
		Description: "Each job's state is one of Flink's: CREATED, RUNNING, FAILING, RESTARTING, CANCELLING,\n" +
			"CANCELED, FINISHED, FAILED, SUSPENDED. ATTEMPT counts from 0; RESTARTS are those its restart\n" +
			"strategy made; the last column says why the latest restart happened, or why the job failed.",
		Flags: []cli.Flag{natsFlag, dataFlag, outputFlag},
		Action: func(c *cli.Context) error {
			return listing(c, coordinator.ListJobs, printJobs)
		},
	}
}

// printJobs prints one aligned row per job under a header.
func printJobs(w io.Writer, jobs []transport.JobInfo) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	// A TENANT column only where jobs have owners (the admin's view).
	tenants := slices.ContainsFunc(jobs, func(j transport.JobInfo) bool { return j.Tenant != "" })
	if tenants {
		fmt.Fprint(tw, "TENANT\t")
	}
	fmt.Fprintln(tw, "JOB\tSTATE\tATTEMPT\tRESTARTS\tSTARTED\tLAST RESTART CAUSE / ERROR")
	for _, j := range jobs {
		if tenants {
			fmt.Fprintf(tw, "%s\t", orDefault(j.Tenant, "-"))
		}
		why := ""
		switch {
		case j.Error != "":
			why = "error: " + j.Error
		case j.Cause != "":
			why = j.Cause
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", j.JobID, j.State, j.Attempt, j.Restarts,
			j.Started.Format(time.RFC3339), oneLine(why, 200))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A row without a cause would end in the padding of its last column.
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if _, err := io.WriteString(w, strings.TrimRight(line, " ")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// oneLine keeps a cause or error, which may quote a guest, on one line of
// at most limit runes: control characters would break the table or the
// terminal.
func oneLine(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > limit {
		s = string(r[:limit-1]) + "…"
	}
	return s
}

func workersCommand() *cli.Command {
	return &cli.Command{
		Name:  "workers",
		Usage: "list the workers of a cluster: slots, subtasks placed, last heartbeat",
		Description: "The cluster's admin sees every worker registered with the coordinator; LIVE turns\n" +
			"to no once a worker has been silent longer than the worker timeout (its jobs fail over).",
		Flags: []cli.Flag{natsFlag, dataFlag, outputFlag},
		Action: func(c *cli.Context) error {
			return listing(c, coordinator.ListWorkers, printWorkers)
		},
	}
}

// now is the clock of "last seen" (tests fix it).
var now = time.Now

// printWorkers prints one aligned row per worker under a header.
func printWorkers(w io.Writer, ws []transport.WorkerRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSLOTS\tSUBTASKS\tLAST SEEN\tLIVE")
	for _, r := range ws {
		slots := "unlimited"
		if r.Slots > 0 {
			slots = fmt.Sprint(r.Slots)
		}
		live := "yes"
		if !r.Live {
			live = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s ago\t%s\n", r.ID, slots, r.Used, now().Sub(r.LastSeen).Round(100*time.Millisecond), live)
	}
	return tw.Flush()
}

// listing asks the cluster (--nats, or the deploy on --data) for rows and
// prints them as a table, or as JSON with -o json.
func listing[T any](c *cli.Context, ask func(context.Context, *nats.Conn) ([]T, string, error), table func(io.Writer, []T) error) error {
	asJSON, err := jsonOutput(c)
	if err != nil {
		return err
	}
	e, err := clientEngine(c)
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	rows, leader, err := ask(c.Context, e.Conn())
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(c.App.Writer, jsonView(orEmpty(rows)))
	}
	if leader != "" {
		// On stderr: the table stays the same for scripts.
		fmt.Fprintf(c.App.ErrWriter, "coordinator %s leads\n", leader)
	}
	return table(c.App.Writer, rows)
}
