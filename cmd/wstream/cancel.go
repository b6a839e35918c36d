package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/engine"
)

// clientEngine connects to the server at --nats, or to the one a running
// `wstream deploy` embeds for --data.
func clientEngine(c *cli.Context) (*engine.Engine, error) {
	url := c.String("nats")
	local := url == ""
	if local {
		u, err := engine.LocalURL(c.String("data"))
		if err != nil {
			return nil, err
		}
		url = u
	}
	tmp, err := os.MkdirTemp("", "wstream-client")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	natsOpts, err := natsOptions(c)
	if err != nil {
		return nil, err
	}
	natsOpts = defaultAdminCreds(c, natsOpts)
	e, err := engine.Start(c.Context, engine.Options{DataDir: tmp, NATSURL: url, NATSOptions: natsOpts, NoCoordinator: true})
	if err != nil && local && errors.Is(err, nats.ErrNoServers) {
		// A deploy or server killed (SIGKILL, a crash) leaves its URL file.
		data := c.String("data")
		return nil, fmt.Errorf("tried %s, the NATS server %s names, and none answers: the wstream deploy or server that wrote it is no longer running (killed?). Start it again (wstream deploy --resume JOB --data %s, or wstream server --data %s), or pass --nats URL of a running cluster",
			url, engine.URLFile(data), data, data)
	}
	return e, err
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel a running job of a cluster",
		ArgsUsage: "JOB",
		Flags:     []cli.Flag{natsFlag, dataFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{fmt.Errorf("cancel: want one JOB argument, got %d", c.NArg())}
			}
			e, err := clientEngine(c)
			if err != nil {
				return err
			}
			defer e.Close(context.Background())
			id := c.Args().First()
			// An unknown job is the coordinator's to answer (and audit).
			if row, err := findJob(c.Context, e.Conn(), id); err == nil && ended(row.State) {
				return fmt.Errorf("job %s has already ended (%s): there is nothing to cancel", id, row.State)
			}
			if err := coordinator.Cancel(c.Context, e.Conn(), id); err != nil {
				return err
			}
			if asJSON, _ := jsonOutput(c); asJSON {
				return writeJSON(c.App.Writer, api.CancelReply{JobID: id, Cancelling: true})
			}
			fmt.Fprintf(c.App.ErrWriter, "job %s cancelling\n", id)
			return nil
		},
	}
}
