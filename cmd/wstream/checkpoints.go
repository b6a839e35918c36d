package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
)

func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:      "checkpoints",
		Usage:     "list the checkpoint history of a job in --data, or of a cluster's job through --nats",
		ArgsUsage: "[JOB]",
		Description: `Prints one line per checkpoint of the job (the only job when JOB is
omitted): id, status, duration, state size, persisted in-flight bytes, and the
slowest subtask's alignment, sync and async times; then the checkpoints retained
on disk, and the job's upgrades.

A job whose files are in --data (a local deploy's, or a server's on this host) is
read from there. Otherwise, with --nats, through the cluster: the leading
coordinator's REST API, which its lease names (or the context's server URL), with
the admin's token of --data's auth directory or the context's token; the
checkpoints retained are then not listed.`,
		Flags: []cli.Flag{dataFlag, natsFlag, outputFlag},
		Action: func(c *cli.Context) error {
			asJSON, err := jsonOutput(c)
			if err != nil {
				return err
			}
			dir := c.String("data")
			id := c.Args().First()
			if c.String("nats") != "" && !localJob(dir, id) {
				id, hist, ups, err := clusterCheckpoints(c, id)
				if err != nil {
					return err
				}
				return printCheckpoints(c.App.Writer, asJSON, id, hist, nil, ups)
			}
			if id == "" {
				recs, err := coordinator.ListRecords(dir)
				if err != nil {
					return err
				}
				switch len(recs) {
				case 0:
					return fmt.Errorf("no job in %s", dir)
				case 1:
					id = recs[0].JobID
				default:
					var ids []string
					for _, r := range recs {
						ids = append(ids, r.JobID)
					}
					return usageError{fmt.Errorf("checkpoints: %d jobs in %s (%s): name one", len(recs), dir, strings.Join(ids, ", "))}
				}
			}
			if _, err := coordinator.ReadRecord(dir, id); err != nil {
				return err
			}
			hist, err := coordinator.ReadHistory(dir, id)
			if err != nil {
				return err
			}
			st, err := checkpoint.OpenStorage(coordinator.CheckpointRoot(dir, id))
			if err != nil {
				return err
			}
			ids, err := st.Completed()
			if err != nil {
				return err
			}
			ups, err := coordinator.ReadUpgrades(dir, id)
			if err != nil {
				return err
			}
			return printCheckpoints(c.App.Writer, asJSON, id, hist, ids, ups)
		},
	}
}

// printCheckpoints writes a job's checkpoint history and its retained
// checkpoints as a table, or as JSON.
func printCheckpoints(w io.Writer, asJSON bool, id string, hist []coordinator.HistoryEntry, ids []int64, ups []coordinator.UpgradeEntry) error {
	if asJSON {
		return checkpointsJSON(w, id, hist, ids, ups)
	}
	fmt.Fprintf(w, "%-6s %-11s %-9s %-10s %-10s %-10s %-10s %-10s %-10s %-10s %s\n",
		"ID", "KIND", "STATUS", "DURATION", "SIZE", "UPLOADED", "IN-FLIGHT", "ALIGNMENT", "SYNC", "ASYNC", "ATTEMPT")
	for _, e := range hist {
		kind := e.Kind.String()
		if e.Kind == 0 {
			kind = "-"
		}
		if e.Unaligned {
			kind += "*"
		}
		fmt.Fprintf(w, "%-6d %-11s %-9s %-10s %-10s %-10s %-10s %-10s %-10s %-10s %d",
			e.ID, kind, e.Status, e.Duration.Round(time.Millisecond), humanBytes(e.StateSize), humanBytes(e.Uploaded), humanBytes(e.InFlightBytes),
			e.Alignment.Round(time.Millisecond), e.Sync.Round(time.Millisecond), e.Async.Round(time.Millisecond), e.Attempt)
		if e.Reason != "" {
			fmt.Fprintf(w, "  (%s)", e.Reason)
		}
		if e.DeadLetters > 0 {
			fmt.Fprintf(w, "  %d dead letters", e.DeadLetters)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "retained: %v (* = unaligned)\n", ids)
	printUpgrades(w, ups)
	return nil
}

// localJob reports whether job id (any job, for "") has its files in the
// data directory dir.
func localJob(dir, id string) bool {
	if id == "" {
		recs, err := coordinator.ListRecords(dir)
		return err == nil && len(recs) > 0
	}
	_, err := coordinator.ReadRecord(dir, id)
	return err == nil
}
