package tests

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/transport"
)

// TestAttackConnectorFields: tenant bolt names another server and the
// workers' credentials in its JetStream connectors' configs, with the
// field names in other cases (which encoding/json would match to url and
// creds): a source reading the coordinator's job bucket into bolt's own
// stream, a sink creating a stream in the coordinator's account, a sink
// and a dead-letter sink dialing another address. Each is refused at
// submit with an error naming the field and its spelling, over NATS and
// through the CLI; nothing reaches bolt's stream, the coordinator's
// account or the other address; acme's job stays exact and the worker
// alive.
func TestAttackConnectorFields(t *testing.T) {
	mod := module(t, "testops")
	c, tenants := startAttackCluster(t, "acme", "bolt")
	acme, bolt := tenants["acme"], tenants["bolt"]
	g := genSpec{count: 12000, keys: 50, words: 1, seed: 11, rate: 3000}
	d, _ := c.victimJob(t, acme, mod, g)

	createStreams(t, bolt.js, jetstream.StreamConfig{Name: "LOOT", Subjects: []string{"loot.>"}})
	// Another address for the worker to dial: it counts who connects.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var dialed atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			conn.Close()
		}
	}()
	elsewhere := "nats://" + ln.Addr().String()
	creds := c.workerCreds()
	jobsStream := "KV_" + transport.JobsBucket

	// A plan of source → sink, no module needed.
	plan := func(source, sink string) string {
		return fmt.Sprintf(`{"name":"loot","vertices":[
 {"id":"src","kind":"source","connector":%s},
 {"id":"sink","kind":"sink","connector":%s}],
 "edges":[{"from":"src","to":"sink"}]}`, source, sink)
	}
	steal := func(cfg string) string { return `"jetstream","config":` + cfg }
	lootSink := steal(`{"stream":"LOOT","subject":"loot.x"}`)
	genSource := `"gen","config":{"count":100}`
	caseHint := func(at, field, exact string) string {
		return fmt.Sprintf(`%s.%s: unknown field: did you mean %q? (field names are case-sensitive)`, at, field, exact)
	}
	attacks := []struct {
		name, plan, want string
	}{
		{"source URL+Creds reads the job bucket",
			plan(steal(fmt.Sprintf(`{"URL":%q,"Creds":%q,"stream":%q,"bounded":true}`, c.url, creds, jobsStream)), lootSink),
			caseHint(`vertices[0] ("src").config`, "Creds", "creds")},
		{"source Url+CREDS reads the job bucket",
			plan(steal(fmt.Sprintf(`{"stream":%q,"Url":%q,"CREDS":%q,"bounded":true}`, jobsStream, c.url, creds)), lootSink),
			caseHint(`vertices[0] ("src").config`, "CREDS", "creds")},
		{"source URL alone",
			plan(steal(fmt.Sprintf(`{"stream":"LOOT","URL":%q,"bounded":true}`, elsewhere)), lootSink),
			caseHint(`vertices[0] ("src").config`, "URL", "url")},
		{"sink Url+CREDS creates a stream in the coordinator's account",
			plan(genSource, steal(fmt.Sprintf(`{"Url":%q,"CREDS":%q,"stream":"PWN","subject":"pwn.x","create":true}`, c.url, creds))),
			caseHint(`vertices[1] ("sink").config`, "CREDS", "creds")},
		{"sink URL+Creds creates a stream in the coordinator's account",
			plan(genSource, steal(fmt.Sprintf(`{"URL":%q,"Creds":%q,"stream":"PWN","subject":"pwn.x","create":true}`, c.url, creds))),
			caseHint(`vertices[1] ("sink").config`, "Creds", "creds")},
		{"sink URL dials elsewhere",
			plan(genSource, steal(fmt.Sprintf(`{"URL":%q,"stream":"LOOT","subject":"loot.x"}`, elsewhere))),
			caseHint(`vertices[1] ("sink").config`, "URL", "url")},
		{"sink url, exact, dials elsewhere",
			plan(genSource, steal(fmt.Sprintf(`{"url":%q,"stream":"LOOT","subject":"loot.x"}`, elsewhere))),
			`config.url: names a NATS server; a tenant job's JetStream connectors use the tenant's own account`},
		{"sink with url twice, the last elsewhere",
			`{"name":"loot","vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":100}},` +
				fmt.Sprintf(`{"id":"sink","kind":"sink","connector":"jetstream","config":{"url":"","stream":"LOOT","subject":"loot.x","url":%q}}],`, elsewhere) +
				`"edges":[{"from":"src","to":"sink"}]}`,
			`config.url: names a NATS server`},
		{"dead-letter sink URL dials elsewhere",
			`{"name":"loot","onGuestError":{"policy":"dead-letter","sink":{"connector":"jetstream","config":` +
				fmt.Sprintf(`{"URL":%q,"stream":"LOOT","subject":"loot.dl"}}},`, elsewhere) +
				`"vertices":[{"id":"src","kind":"source","connector":"gen","config":{"count":100}},{"id":"sink","kind":"sink","connector":"jetstream","config":{"stream":"LOOT","subject":"loot.x"}}],` +
				`"edges":[{"from":"src","to":"sink"}]}`,
			`onGuestError.sink: connector jetstream: config.URL: unknown field: did you mean "url"?`},
		{"plan fields in another case",
			`{"name":"loot","Vertices":[],"edges":[]}`,
			`plan: unknown field "Vertices": did you mean "vertices"? (field names are case-sensitive)`},
	}
	for _, a := range attacks {
		// Over NATS, as a hostile client would.
		if e := ask(bolt.nc, transport.SubjectSubmit, transport.SubmitRequest{Name: "loot", Plan: []byte(a.plan)}); !strings.Contains(e, a.want) {
			t.Errorf("%s: submit answered %q, want it refused with %q", a.name, e, a.want)
		}
	}
	// Through the CLI: refused too, with the same words.
	bdir := filepath.Join(c.dir, "bolt")
	if err := os.MkdirAll(bdir, 0o755); err != nil {
		t.Fatal(err)
	}
	writePlan(t, bdir, attacks[0].plan)
	r := runCLI(t, bdir, "deploy", "--nats", c.url, "--nats-creds", bolt.creds, "--plan", "plan.json", mod)
	if r.code == 0 || !strings.Contains(r.stderr, attacks[0].want) {
		t.Errorf("bolt's deploy of %s: exit %d, want the refusal %q\n%s", attacks[0].name, r.code, attacks[0].want, r.stderr)
	}

	c.victimExact(t, acme, d, g)

	// Nothing got through: bolt's stream is empty, the coordinator's
	// account has no stream PWN, nobody dialed the other address.
	if n := streamCount(bolt.js, "LOOT"); n != 0 {
		t.Errorf("bolt's stream LOOT holds %d messages (the job bucket's records)", n)
	}
	// The admin's credentials: the worker's reach no JetStream API.
	_, admin := c.connect(t, filepath.Join(c.auth, "admin.creds"))
	if _, err := admin.Stream(waitCtx(t), "PWN"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream PWN in the coordinator's account: %v, want not found", err)
	}
	if n := dialed.Load(); n != 0 {
		t.Errorf("%d connections to %s, the address bolt named", n, elsewhere)
	}
	// The refusals are audited, with their errors.
	refused := 0
	for _, e := range c.auditLines(t) {
		if e["tenant"] == "bolt" && strings.HasPrefix(fmt.Sprint(e["action"]), "submit") && e["error"] != nil {
			refused++
		}
	}
	if refused < len(attacks) {
		t.Errorf("%d refused submits of bolt's audited, want at least %d", refused, len(attacks))
	}
	c.workerAlive(t)
}
