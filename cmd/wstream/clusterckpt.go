package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/coordinator"
)

// clusterCheckpoints reads job id's checkpoint history and upgrades
// through the cluster at --nats: the REST API of the leading coordinator,
// whose URL its lease in JetStream names (or the context's server), as
// the admin (DATA/auth/admin.token of the server's --data on this host)
// or with the context's token. The checkpoints retained are the server's
// to know: none are listed.
func clusterCheckpoints(c *cli.Context, id string) (job string, hist []coordinator.HistoryEntry, ups []coordinator.UpgradeEntry, err error) {
	e, err := clientEngine(c)
	if err != nil {
		return "", nil, nil, err
	}
	defer e.Close(context.Background())
	ctx, cancel := context.WithTimeout(c.Context, time.Minute)
	defer cancel()
	if id == "" {
		jobs, _, err := coordinator.ListJobs(ctx, e.Conn())
		if err != nil {
			return "", nil, nil, err
		}
		if len(jobs) == 0 {
			return "", nil, nil, fmt.Errorf("no job on the cluster at %s", c.String("nats"))
		}
		if len(jobs) != 1 {
			var ids []string
			for _, j := range jobs {
				ids = append(ids, j.JobID)
			}
			return "", nil, nil, usageError{fmt.Errorf("checkpoints: %d jobs on the cluster (%s): name one", len(jobs), strings.Join(ids, ", "))}
		}
		id = jobs[0].JobID
	} else if _, err := findJob(ctx, e.Conn(), id); err != nil {
		return "", nil, nil, err
	}
	base, token, err := restOf(ctx, c, e.Conn())
	if err != nil {
		return "", nil, nil, err
	}
	var list api.CheckpointList
	if err := restGet(ctx, base+"/v1/jobs/"+url.PathEscape(id)+"/checkpoints/history", token, &list); err != nil {
		return "", nil, nil, err
	}
	var detail api.Job
	if err := restGet(ctx, base+"/v1/jobs/"+url.PathEscape(id), token, &detail); err != nil {
		return "", nil, nil, err
	}
	// REST answers newest first; the history is oldest first.
	for i := len(list.History) - 1; i >= 0; i-- {
		hist = append(hist, historyOf(list.History[i]))
	}
	for _, u := range detail.Upgrades {
		ups = append(ups, upgradeEntryOf(u))
	}
	return id, hist, ups, nil
}

// restOf finds the REST API of the cluster's leading coordinator and the
// token to send it.
func restOf(ctx context.Context, c *cli.Context, nc *nats.Conn) (base, token string, err error) {
	settings, _, err := chosenContext(c)
	if err != nil {
		return "", "", err
	}
	base, token = settings["server"], settings["token"]
	if base == "" {
		if base, err = leaderHTTP(ctx, nc); err != nil {
			return "", "", err
		}
		if base == "" {
			return "", "", fmt.Errorf("checkpoints --nats: the cluster's coordinator names no REST API (start wstream server with --http, or give the context a server URL: wstream context add --server URL)")
		}
	}
	if token == "" {
		if b, err := os.ReadFile(filepath.Join(authDir(c), adminTokenFile)); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	return strings.TrimRight(base, "/"), token, nil
}

// restGet reads one answer of the REST API into v; an error answer
// becomes the command's error, with what the server said.
func restGet(ctx context.Context, u, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the cluster's REST API: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("GET %s: %s", u, res.Status)
	}
	return json.Unmarshal(b, v)
}

// historyOf is a checkpoint of the REST API as a line of the history.
func historyOf(c api.Checkpoint) coordinator.HistoryEntry {
	kind := checkpoint.KindCheckpoint
	if c.Kind == checkpoint.KindSavepoint.String() {
		kind = checkpoint.KindSavepoint
	}
	return coordinator.HistoryEntry{ID: c.ID, Kind: kind, Attempt: c.Attempt, Status: c.Status, Reason: c.Reason, Trigger: c.TriggerTime,
		Done: c.EndTime, Duration: time.Duration(c.DurationMillis) * time.Millisecond, StateSize: c.StateSize, Uploaded: c.Uploaded,
		InFlightBytes: c.InFlightBytes, Alignment: time.Duration(c.AlignmentMs) * time.Millisecond, Sync: time.Duration(c.SyncMs) * time.Millisecond,
		Async: time.Duration(c.AsyncMs) * time.Millisecond, Unaligned: c.Unaligned, DeadLetters: c.DeadLetters}
}

// upgradeEntryOf is an upgrade of the REST API as a line of the history.
func upgradeEntryOf(u api.Upgrade) coordinator.UpgradeEntry {
	e := coordinator.UpgradeEntry{Time: time.UnixMilli(u.Time), Outcome: u.Outcome, Cause: u.Cause, Savepoint: u.Savepoint,
		FromAttempt: u.FromAttempt, Attempt: u.Attempt, OldModule: u.OldModule, OldDigest: u.OldDigest, NewModule: u.NewModule,
		NewDigest: u.NewDigest, OldSubtasks: u.OldSubtasks, NewSubtasks: u.NewSubtasks, Migrated: u.Migrated}
	if u.DowntimeMillis != nil {
		e.Downtime, e.DowntimeKnown = time.Duration(*u.DowntimeMillis)*time.Millisecond, true
	}
	return e
}

// leaderHTTP is the REST API's URL the leading coordinator's lease names
// ("" when it serves none). A coordinator writes it with the renewal
// after it started serving: a lease without one is read again for up to
// a lease period.
func leaderHTTP(ctx context.Context, nc *nats.Conn) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	kv, err := js.KeyValue(ctx, coordinator.LeaderBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	start, lease := time.Now(), coordinator.DefaultLease
	for {
		var l coordinator.LeaderInfo
		e, err := kv.Get(ctx, "coordinator")
		if err == nil {
			err = json.Unmarshal(e.Value(), &l)
		}
		if err == nil && l.HTTP != "" {
			return l.HTTP, nil
		}
		if err == nil && l.LeaseMillis > 0 {
			lease = time.Duration(l.LeaseMillis) * time.Millisecond
		}
		if time.Since(start) > lease {
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
