package coordinator

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/wstream/wstream/transport"
)

// What a caller is answered: a job it may not see is absent in one text
// whether it never was or is another tenant's, and a tenant's answers name
// no path of the server's data directory. Every request is audited once,
// with the error its caller was answered.

// noJobError is the answer for a job the caller cannot see.
type noJobError struct{ id string }

func (e noJobError) Error() string        { return fmt.Sprintf("no job %q", e.id) }
func (e noJobError) Is(target error) bool { return target == ErrNoJob }

// errNoJob is the one answer for job id when the caller may not see it.
func errNoJob(id string) error { return noJobError{id} }

// answerError is an error reworded for its caller; it unwraps to the
// original so that errors.Is still tells ErrNoJob and the like.
type answerError struct {
	msg string
	err error
}

func (e *answerError) Error() string { return e.msg }
func (e *answerError) Unwrap() error { return e.err }

// forCaller returns err as who is answered: for a tenant, the server's
// data directory is left out of the text, and the tenant's own part of it
// shows as "<TENANT's area>".
func (c *Coordinator) forCaller(who caller, err error) error {
	if err == nil {
		return nil
	}
	msg := c.tenantText(who, err.Error())
	if msg == err.Error() {
		return err
	}
	return &answerError{msg: msg, err: err}
}

// tenantText is s (a job's failure, say) as who reads it.
func (c *Coordinator) tenantText(who caller, s string) string {
	if who.admin() || c.cfg.DataDir == "" || s == "" {
		return s
	}
	return c.withoutPaths(who.tenant, s)
}

// withoutPaths rewrites the server's directories in msg for tenant: the
// data directory as configured and as an absolute path, where a path
// starts (so that a relative "data" leaves "metadata" alone).
func (c *Coordinator) withoutPaths(tenantName, msg string) string {
	dirs := []string{filepath.Clean(c.cfg.DataDir)}
	if abs, err := filepath.Abs(c.cfg.DataDir); err == nil && abs != dirs[0] {
		dirs = append(dirs, abs)
	}
	// The longer first: the relative form may lie within the absolute.
	sort.Slice(dirs, func(i, k int) bool { return len(dirs[i]) > len(dirs[k]) })
	for _, d := range dirs {
		if d == "." || d == string(filepath.Separator) || !strings.Contains(msg, d) {
			continue
		}
		sep := regexp.QuoteMeta(string(filepath.Separator))
		area := regexp.QuoteMeta(filepath.Join(d, "tenants", tenantName))
		re := regexp.MustCompile(`(^|[^\w.` + sep + `-])(?:(` + area + `)|` + regexp.QuoteMeta(d) + `)(` + sep + `|[^\w.-]|$)`)
		msg = re.ReplaceAllStringFunc(msg, func(m string) string {
			sub := re.FindStringSubmatch(m)
			with := "<server data>"
			if sub[2] != "" {
				with = "<" + tenantName + "'s area>"
			}
			return sub[1] + with + sub[3]
		})
	}
	return msg
}

// outcome audits a request of who with the error it is answered, and
// returns that error.
func (c *Coordinator) outcome(who caller, action, jobID string, err error) error {
	err = c.forCaller(who, err)
	c.audit(who, action, jobID, err)
	return err
}

// answerSavepoint wraps reply so that the outcome of a savepoint request
// is audited once, when its caller is answered, in the words it is
// answered with.
func (c *Coordinator) answerSavepoint(who caller, action, jobID string, reply func(transport.SavepointReply)) func(transport.SavepointReply) {
	var once sync.Once
	return func(r transport.SavepointReply) {
		once.Do(func() {
			if r.Error != "" {
				r.Error = c.outcome(who, action, jobID, errors.New(r.Error)).Error()
			} else {
				c.audit(who, action, jobID, nil)
			}
			reply(r)
		})
	}
}
